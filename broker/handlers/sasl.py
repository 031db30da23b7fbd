"""SASL requests on listeners without SASL, and the SCRAM credentials SASL checks against
(DescribeUserScramCredentials, AlterUserScramCredentials; KIP-554).

On a SASL listener the connection answers SaslHandshake and SaslAuthenticate itself
(broker.sasl_session); these handlers are reached only on the others, where Kafka answers
ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.scram_changes import ScramDeletion, ScramUpsertion
from protocol.apis import ApiKey

from .admin import handles_on_controller
from .registry import RequestContext, handles


@handles(ApiKey.SASL_HANDSHAKE)
async def sasl_handshake(ctx: RequestContext, request) -> object:
    return ctx.response("SaslHandshakeResponse", error_code=ErrorCode.illegal_sasl_state,
                        mechanisms=())


@handles(ApiKey.SASL_AUTHENTICATE)
async def sasl_authenticate(ctx: RequestContext, request) -> object:
    return ctx.response("SaslAuthenticateResponse", error_code=ErrorCode.illegal_sasl_state,
                        error_message="This listener does not use SASL", auth_bytes=b"",
                        session_lifetime=0)


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
async def describe_user_scram_credentials(ctx: RequestContext, request) -> object:
    """Every user with a credential when no user is named; otherwise each named user, with
    RESOURCE_NOT_FOUND for one without and DUPLICATE_RESOURCE for one named twice."""
    controller = ctx.services.controller
    image = controller.image if controller is not None else ctx.services.image
    names = [user.name for user in request.users or ()]
    described = image.scram_credentials.describe(names or None)
    results = []
    for name in dict.fromkeys(names) if names else described:
        infos = ()
        if names.count(name) > 1:
            error, message = (ErrorCode.duplicate_resource,
                              "Cannot describe SCRAM credentials for the same user twice in a "
                              "single request")
        elif name not in described:
            error, message = (ErrorCode.resource_not_found,
                              "Attempt to describe a user credential that does not exist")
        else:
            error, message = ErrorCode.none, None
            infos = tuple(ctx.response("CredentialInfo", mechanism=info.mechanism.type_id,
                                       iterations=info.iterations)
                          for info in described[name])
        results.append(ctx.response("DescribeUserScramCredentialsResult", user=name,
                                    error_code=error, error_message=message,
                                    credential_infos=infos))
    return ctx.response("DescribeUserScramCredentialsResponse", throttle_time=0,
                        error_code=ErrorCode.none, error_message=None, results=tuple(results))


@handles_on_controller(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
async def alter_user_scram_credentials(ctx: RequestContext, request) -> object:
    outcome = await ctx.services.controller.alter_scram_credentials(
        [ScramDeletion(d.name, d.mechanism) for d in request.deletions],
        [ScramUpsertion(u.name, u.mechanism, u.iterations, u.salt, u.salted_password)
         for u in request.upsertions])
    return ctx.response("AlterUserScramCredentialsResponse", throttle_time=0, results=tuple(
        ctx.response("AlterUserScramCredentialsResult", user=user,
                     error_code=ErrorCode.none if error is None else error.error_code,
                     error_message=None if error is None else error.message)
        for user, error in outcome.items()))
