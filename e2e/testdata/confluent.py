"""The official side of the e2e suite's registry case: confluent-kafka-python's own serializers
and deserializers against the test's schema registry, reading and writing one record per line
(base64 of the wire-format bytes on the Kafka side, JSON on the other).

  confluent.py serialize-avro URL TOPIC SCHEMA.avsc        JSON lines in, base64 lines out
  confluent.py deserialize-avro URL TOPIC                   base64 lines in, JSON lines out
  confluent.py deserialize-protobuf URL TOPIC DESCRIPTORS MESSAGE
                                                            base64 lines in, JSON lines out
                                                            (DESCRIPTORS: protoc --descriptor_set_out)
"""
import base64
import json
import sys

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext


def main():
    cmd, url, topic = sys.argv[1:4]
    client = SchemaRegistryClient({"url": url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    lines = [l for l in sys.stdin.read().splitlines() if l.strip()]
    if cmd == "serialize-avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        with open(sys.argv[4]) as f:
            schema = f.read()
        # the schema the test registered: the serializer must find it, not register its own
        ser = AvroSerializer(client, schema, conf={"auto.register.schemas": False, "use.latest.version": True})
        for l in lines:
            print(base64.b64encode(ser(json.loads(l), ctx)).decode())
    elif cmd == "deserialize-avro":
        from confluent_kafka.schema_registry.avro import AvroDeserializer

        de = AvroDeserializer(client)
        for l in lines:
            print(json.dumps(de(base64.b64decode(l), ctx), sort_keys=True))
    elif cmd == "deserialize-protobuf":
        from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

        with open(sys.argv[4], "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
        pool = descriptor_pool.DescriptorPool()
        for fd in fds.file:
            pool.Add(fd)
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(sys.argv[5]))
        de = ProtobufDeserializer(cls, {"use.deprecated.format": False})
        for l in lines:
            print(json.dumps(json_format.MessageToDict(de(base64.b64decode(l), ctx)), sort_keys=True))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
