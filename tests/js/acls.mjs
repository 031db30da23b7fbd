#!/usr/bin/env node
// kafkajs's ACL administration against kipper, driven by tests/system/test_acls.py.
//
//   node acls.mjs --bootstrap 127.0.0.1:9092 --topic T
//
// Creates two ACLs on the topic (a literal ALLOW and a prefixed DENY), describes the
// topic's ACLs, deletes the DENY with a filter, describes them again. Prints one JSON
// document on stdout; the Python test checks it.
import kafkajs from 'kafkajs'
import { newKafka, parseFlags } from './common.mjs'

const { AclResourceTypes, AclOperationTypes, AclPermissionTypes, ResourcePatternTypes } = kafkajs

async function main () {
  const args = parseFlags(process.argv.slice(2))
  for (const required of ['bootstrap', 'topic']) {
    if (args[required] === undefined) throw new Error(`missing --${required}`)
  }
  const topic = args.topic
  const admin = newKafka('kipper-kafkajs-acls-test', args.bootstrap).admin()
  await admin.connect()
  const result = {}
  try {
    const allow = {
      resourceType: AclResourceTypes.TOPIC, resourceName: topic,
      resourcePatternType: ResourcePatternTypes.LITERAL, principal: 'User:alice', host: '*',
      operation: AclOperationTypes.READ, permissionType: AclPermissionTypes.ALLOW,
    }
    const deny = {
      ...allow, resourceName: topic.slice(0, 3),
      resourcePatternType: ResourcePatternTypes.PREFIXED, principal: 'User:bob',
      operation: AclOperationTypes.WRITE, permissionType: AclPermissionTypes.DENY,
    }
    result.created = await admin.createAcls({ acl: [allow, deny] })
    const matching = {
      resourceType: AclResourceTypes.TOPIC, resourceName: topic,
      resourcePatternType: ResourcePatternTypes.MATCH, operation: AclOperationTypes.ANY,
      permissionType: AclPermissionTypes.ANY,
    }
    result.described = (await admin.describeAcls(matching)).resources
    result.deleted = (await admin.deleteAcls({
      filters: [{ ...matching, resourcePatternType: ResourcePatternTypes.PREFIXED,
                  resourceName: topic.slice(0, 3) }],
    })).filterResponses
    result.after = (await admin.describeAcls(matching)).resources
  } finally {
    await admin.disconnect()
  }
  process.stdout.write(JSON.stringify(result) + '\n')
}

main().catch(error => {
  process.stderr.write(`${error.stack || error}\n`)
  process.exit(1)
})
