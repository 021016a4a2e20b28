"""Cross-checks internal/schema against confluent-kafka-python's own serializers.

    python3 confluent.py produce URL DIR [PREFIX]   serializes each case to DIR/<case>.bin
    python3 confluent.py consume URL DIR [PREFIX]   deserializes DIR/go-<case>.bin, as millrace
                                                    encoded it, and checks it is the value produced

URL is the schema registry's; PREFIX starts each topic's name (so each run against a shared,
real registry has subjects of its own); DIR/gen holds the _pb2 modules protoc generated from
testdata/shop/*.proto. Exits 1 naming each case that differs.
"""
import datetime
import decimal
import json
import os
import sys
import uuid

here = os.path.dirname(os.path.abspath(__file__))
url, out = sys.argv[2], sys.argv[3]
prefix = sys.argv[4] if len(sys.argv) > 4 else ""
sys.path.insert(0, os.path.join(out, "gen"))

from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer  # noqa: E402
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402
from google.protobuf import timestamp_pb2  # noqa: E402
from shop import common_pb2, order_pb2  # noqa: E402


def text(name):
    with open(os.path.join(here, name)) as f:
        return f.read()


client = SchemaRegistryClient({"url": url})
utc = datetime.timezone.utc

order = {
    "id": 7,
    "at": datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=utc),
    "day": datetime.date(2022, 1, 8),
    "price": decimal.Decimal("4.82"),
    "ref": uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    "blob": b"\xff\x00a",
    "tag": b"ab",
    "ship": {"zip": "00100", "lines": ["Main St 1"]},
    "note": "leave at door",
    "state": "PAID",
    "counts": {"apples": 3},
}
at = timestamp_pb2.Timestamp()
at.FromMilliseconds(1700000000123)
proto_order = order_pb2.Order(
    order_id=7,
    total=common_pb2.Money(currency="EUR", units=12),
    lines=[order_pb2.Order.Line(sku="a-1", qty=2)],
    state=order_pb2.STATE_PAID,
    at=at,
    blob=b"\xff\x00a",
    counts={"apples": 3},
)
reason = order_pb2.Refund.Reason(text="late")
user = {"name": "ann", "age": 30, "tags": ["a", "b"]}

# Each case: topic, serializer, deserializer, the value produced, the value millrace's
# encoding of its own decoding must read back as.
v1, v2 = text("user.v1.avsc"), text("user.v2.avsc")
cases = {
    "avro": ("py-avro", lambda: AvroSerializer(client, text("order.avsc")), lambda: AvroDeserializer(client), order, order),
    # Written with v1; millrace reads it as v2 (pinned) and writes that: the added field's
    # default, the removed field gone.
    "avro-v1": ("py-evo", lambda: AvroSerializer(client, v1), lambda: AvroDeserializer(client), {"name": "ann", "nick": "a"}, {"name": "ann", "email": "none"}),
    "avro-v2": ("py-evo", lambda: AvroSerializer(client, v2), lambda: AvroDeserializer(client, v2), {"name": "bo", "email": "b@x"}, {"name": "bo", "email": "b@x"}),
    "protobuf": ("py-proto", lambda: ProtobufSerializer(order_pb2.Order, client, {"use.deprecated.format": False}),
                 lambda: ProtobufDeserializer(order_pb2.Order, {"use.deprecated.format": False}), proto_order, proto_order),
    "protobuf-nested": ("py-proto-reason", lambda: ProtobufSerializer(order_pb2.Refund.Reason, client, {"use.deprecated.format": False}),
                        lambda: ProtobufDeserializer(order_pb2.Refund.Reason, {"use.deprecated.format": False}), reason, reason),
    "json": ("py-json", lambda: JSONSerializer(text("user.schema.json"), client), lambda: JSONDeserializer(text("user.schema.json")), user, user),
}


def ctx(topic):
    return SerializationContext(prefix + topic, MessageField.VALUE)


def produce():
    for name, (topic, ser, _, value, _) in cases.items():
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(ser()(value, ctx(topic)))


def consume():
    bad = []
    for name, (topic, _, de, _, want) in cases.items():
        with open(os.path.join(out, "go-" + name + ".bin"), "rb") as f:
            data = f.read()
        try:
            got = de()(data, ctx(topic))
        except Exception as e:  # noqa: BLE001 - any failure is the case's
            bad.append("%s: the deserializer failed on millrace's bytes %s: %r" % (name, data.hex(), e))
            continue
        if got != want:
            bad.append("%s: read back %r; want %r" % (name, got, want))
    for b in bad:
        print(b, file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    {"produce": produce, "consume": consume}[sys.argv[1]]()
