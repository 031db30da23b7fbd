#!/usr/bin/env node
// Produce with kafkajs, which puts every partition a broker leads in one Produce request (as
// the Java client does; librdkafka sends one partition per request), for bench/scale_bench.py.
//
//   node bench/kafkajs_produce.mjs --bootstrap 127.0.0.1:9092 --topic T --partitions 10000 \
//        --records 19531 --record-size 1024 [--chunk 2000] [--in-flight 4]
//
// Record i goes to partition i % partitions, acks=all, no compression; `chunk` records per
// sendBatch, `in-flight` sendBatch calls at a time. Prints one JSON document on stdout:
// records, seconds, the client's CPU seconds.
import { createRequire } from 'node:module'
import { randomBytes } from 'node:crypto'

// kafkajs is installed for the client tests (tests/js, `npm ci --prefix tests/js`).
const require = createRequire(new URL('../tests/js/package.json', import.meta.url))
const { Kafka, logLevel } = require('kafkajs')

function flags (argv) {
  const args = {}
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || argv[i + 1] === undefined) {
      throw new Error(`bad argument list near ${argv[i]}`)
    }
    args[argv[i].slice(2)] = argv[i + 1]
  }
  for (const required of ['bootstrap', 'topic', 'partitions', 'records', 'record-size']) {
    if (args[required] === undefined) throw new Error(`missing --${required}`)
  }
  return args
}

const args = flags(process.argv.slice(2))
const partitions = parseInt(args.partitions, 10)
const records = parseInt(args.records, 10)
const chunk = parseInt(args.chunk || '2000', 10)
const inFlight = parseInt(args['in-flight'] || '4', 10)
const payloads = Array.from({ length: 16 }, () => randomBytes(parseInt(args['record-size'], 10)))

const kafka = new Kafka({ brokers: args.bootstrap.split(','), clientId: 'scale-bench', logLevel: logLevel.ERROR })
const producer = kafka.producer({ allowAutoTopicCreation: false, maxInFlightRequests: inFlight })
await producer.connect()
const started = process.hrtime.bigint()
const cpuBefore = process.cpuUsage()
let next = 0
async function sender () {
  while (next < records) {
    const first = next
    next = Math.min(records, next + chunk)
    const messages = []
    for (let i = first; i < next; i++) messages.push({ partition: i % partitions, value: payloads[i & 15] })
    await producer.sendBatch({ acks: -1, timeout: 120000, topicMessages: [{ topic: args.topic, messages }] })
  }
}
await Promise.all(Array.from({ length: inFlight }, sender))
const seconds = Number(process.hrtime.bigint() - started) / 1e9
const cpu = process.cpuUsage(cpuBefore)
await producer.disconnect()
console.log(JSON.stringify({ records, seconds, client_cpu_s: (cpu.user + cpu.system) / 1e6 }))
