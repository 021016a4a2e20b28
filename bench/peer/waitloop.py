#!/usr/bin/env python3
"""The hand-written Kafka loop of BenchmarkWaiting: bench/peer/loop.py with a call per record,
a stand-in for an HTTP API or a database that takes CALL_MS milliseconds (time.sleep). With
THREADS 1 the calls of a consumed batch run one after another; with more, on a thread pool of
that many (concurrent.futures), the batch's outputs produced once all its calls returned, in
order: what a user who knows threads writes. confluent-kafka (librdkafka), one process:
consume up to 100 records, call, json.dumps each, produce, flush, commit synchronously; again.

Usage: waitloop.py BROKERS IN_TOPIC OUT_TOPIC GROUP CALL_MS THREADS. It runs until SIGTERM.
"""
import concurrent.futures
import json
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer


def main():
    brokers, inlet, outlet, group = sys.argv[1:5]
    call_s = float(sys.argv[5]) / 1000
    threads = int(sys.argv[6])
    running = [True]

    def stop(*_):
        running[0] = False

    def call(value):
        time.sleep(call_s)  # the API call
        return json.dumps(json.loads(value)).encode()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consumer = Consumer({
        "bootstrap.servers": brokers,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    producer = Producer({"bootstrap.servers": brokers})
    pool = concurrent.futures.ThreadPoolExecutor(threads) if threads > 1 else None
    consumer.subscribe([inlet])
    try:
        while running[0]:
            msgs = consumer.consume(100, timeout=0.2)
            if not msgs:
                continue
            for m in msgs:
                if m.error():
                    raise KafkaException(m.error())
            values = [m.value() for m in msgs]
            outs = pool.map(call, values) if pool else map(call, values)
            for m, out in zip(msgs, outs):
                producer.produce(outlet, out, key=m.key())
            if producer.flush(30) != 0:
                raise KafkaException("records still unwritten 30 s after flush")
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
        if pool:
            pool.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
