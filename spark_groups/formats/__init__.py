"""Record formats: keys and values in Confluent's wire format, decoded on the executors.

* :mod:`~spark_groups.formats.wire`: the 5-byte header;
* :mod:`~spark_groups.formats.registry`: one schema-registry client per worker, schemas by id
  cached, an unreachable registry retried within a bound;
* :mod:`~spark_groups.formats.avro_types`: an Avro schema as Arrow and Spark types, as
  Spark's ``from_avro`` maps them;
* :mod:`~spark_groups.formats.avro_decode`: Avro payloads into an Arrow column, each written
  with its writer schema and resolved to the reader schema;
* :mod:`~spark_groups.formats.avro_program`: that resolution compiled, per writer schema,
  into the operations of the C decoder (``_avro.c``), over the reader's Arrow columns;
* :mod:`~spark_groups.formats.avro_native`: the C decoder of one column, fastavro's
  fallback where it is not built or does not take a schema;
* :mod:`~spark_groups.formats.protobuf_schema`: a Protobuf schema (base64 descriptor or
  ``.proto`` text, with its imports) as descriptors, each schema in a pool of its own;
* :mod:`~spark_groups.formats.protobuf_types`: a Protobuf message as Arrow and Spark types,
  as Spark's ``from_protobuf`` maps them;
* :mod:`~spark_groups.formats.protobuf_decode`: Protobuf payloads (their message indexes
  first) into an Arrow column, with the reader's message, writer schemas checked once;
* :mod:`~spark_groups.formats.json_types`, :mod:`~spark_groups.formats.json_decode`: a JSON
  Schema as Arrow types, and JSON payloads read by name into them;
* :mod:`~spark_groups.formats.column_values`: what the column decoders share (the bad record,
  values into Arrow);
* :mod:`~spark_groups.formats.decoder`: a read batch's ``key`` and ``value`` decoded, bad
  records split off;
* :mod:`~spark_groups.formats.bad_records`: those records into the dead-letter table;
* :mod:`~spark_groups.formats.spark_ddl`: Arrow types as Spark DDL.

docs/formats.md is the user's reference; docs/architecture.md, "Record formats".
"""
