#!/usr/bin/env python3
"""The hand-written Kafka loop millrace is measured against: what a user would write
instead of a streamlet. confluent-kafka (librdkafka), one process: consume up to 100 records,
json.loads and json.dumps each, produce it, flush, commit synchronously; again.

Usage: loop.py BROKERS IN_TOPIC OUT_TOPIC GROUP. It runs until SIGTERM or SIGINT.
"""
import json
import signal
import sys

from confluent_kafka import Consumer, KafkaException, Producer


def main():
    brokers, inlet, outlet, group = sys.argv[1:5]
    running = [True]

    def stop(*_):
        running[0] = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consumer = Consumer({
        "bootstrap.servers": brokers,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    producer = Producer({"bootstrap.servers": brokers})
    consumer.subscribe([inlet])
    try:
        while running[0]:
            msgs = consumer.consume(100, timeout=0.2)
            if not msgs:
                continue
            for m in msgs:
                if m.error():
                    raise KafkaException(m.error())
                producer.produce(outlet, json.dumps(json.loads(m.value())).encode())
            if producer.flush(30) != 0:
                raise KafkaException("records still unwritten 30 s after flush")
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
