from storage.objectstore.testing import object_store, s3_prefix  # noqa: F401
