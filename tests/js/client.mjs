#!/usr/bin/env node
// kafkajs round trip against a kipper broker, driven by tests/system/test_kafkajs.py.
//
//   node client.mjs --bootstrap 127.0.0.1:9092 --topic T --compression zstd --count 10000 \
//                  --base-ts 1700000000000 --ts-step 10 --query-ts 1700000049995,1700000070000 \
//                  [--replication-factor 3]
//
// Creates the topic (admin API), produces `count` records with keys, 1-2 headers and explicit
// CreateTime timestamps (base-ts + i * ts-step) using the given codec, consumes them back with a
// consumer group from the beginning, asks the admin API for offsets by timestamp and the
// earliest/latest offsets, and prints one JSON document on stdout. The Python test checks it.
// The record contents must stay in step with tests/support/dataset.py (make_records).
import { CODECS, newKafka, parseFlags } from './common.mjs'

function parseArgs (argv) {
  const args = parseFlags(argv)
  for (const required of ['bootstrap', 'topic', 'compression', 'count', 'base-ts']) {
    if (args[required] === undefined) throw new Error(`missing --${required}`)
  }
  if (!(args.compression in CODECS)) throw new Error(`unknown compression ${args.compression}`)
  return {
    bootstrap: args.bootstrap,
    topic: args.topic,
    replicationFactor: parseInt(args['replication-factor'] || '1', 10),
    compression: args.compression,
    count: parseInt(args.count, 10),
    baseTs: parseInt(args['base-ts'], 10),
    tsStep: parseInt(args['ts-step'] || '10', 10),
    queryTs: (args['query-ts'] || '').split(',').filter(s => s !== '').map(s => parseInt(s, 10)),
    sendBatch: parseInt(args['send-batch'] || '1000', 10),
    timeoutMs: parseInt(args['timeout-ms'] || '90000', 10),
  }
}

const pad5 = i => String(i).padStart(5, '0')

// Same contents as tests/support/dataset.py:make_records.
function makeRecord (i, baseTs, tsStep) {
  const headers = { h1: `h1-${i}` }
  if (i % 2 === 0) headers.trace = `t-${i * 7}`
  return {
    key: `key-${pad5(i)}`,
    value: `value-${pad5(i)}-` + 'abcdefghij'.repeat((i % 7) + 3),
    headers,
    timestamp: String(baseTs + i * tsStep),
  }
}

function withTimeout (promise, ms, what) {
  let timer
  return Promise.race([
    promise,
    new Promise((resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms)
    }),
  ]).finally(() => clearTimeout(timer))
}

async function main () {
  const opts = parseArgs(process.argv.slice(2))
  const kafka = newKafka('kipper-kafkajs-test', opts.bootstrap)
  const result = { compression: opts.compression, count: opts.count }

  const admin = kafka.admin()
  await admin.connect()
  try {
    result.created = await admin.createTopics({
      topics: [{ topic: opts.topic, numPartitions: 1, replicationFactor: opts.replicationFactor }],
      waitForLeaders: true,
    })

    // Produce: sequential sends keep the order; each send is one batch with the codec.
    const producer = kafka.producer({ allowAutoTopicCreation: false })
    await producer.connect()
    const produceStart = Date.now()
    const acks = []
    try {
      for (let start = 0; start < opts.count; start += opts.sendBatch) {
        const messages = []
        for (let i = start; i < Math.min(opts.count, start + opts.sendBatch); i++) {
          messages.push(makeRecord(i, opts.baseTs, opts.tsStep))
        }
        const res = await producer.send({
          topic: opts.topic,
          compression: CODECS[opts.compression],
          acks: -1,
          messages,
        })
        for (const r of res) acks.push({ partition: r.partition, errorCode: r.errorCode, baseOffset: r.baseOffset })
      }
    } finally {
      await producer.disconnect()
    }
    result.produceMs = Date.now() - produceStart
    result.acks = acks

    // Consume everything back through a consumer group.
    const consumer = kafka.consumer({
      groupId: `kipper-kafkajs-${opts.topic}`,
      maxWaitTimeInMs: 200,
      sessionTimeout: 10000,
      rebalanceTimeout: 10000,
      heartbeatInterval: 1000,
      allowAutoTopicCreation: false,
    })
    const records = []
    const consumeStart = Date.now()
    let finish, fail
    const finished = new Promise((resolve, reject) => { finish = resolve; fail = reject })
    consumer.on(consumer.events.CRASH, ev => fail(new Error(`consumer crashed: ${ev.payload.error}`)))
    await consumer.connect()
    try {
      await consumer.subscribe({ topics: [opts.topic], fromBeginning: true })
      await consumer.run({
        eachBatch: async ({ batch }) => {
          for (const m of batch.messages) {
            const headers = {}
            for (const [k, v] of Object.entries(m.headers || {})) {
              headers[k] = Array.isArray(v) ? v.map(x => x.toString()) : v.toString()
            }
            records.push([
              batch.partition,
              m.offset,
              m.key === null ? null : m.key.toString(),
              m.value === null ? null : m.value.toString(),
              headers,
              m.timestamp,
              m.batchContext ? m.batchContext.timestampType : null,
            ])
          }
          if (records.length >= opts.count) finish()
        },
      })
      await withTimeout(finished, opts.timeoutMs, `consuming ${opts.count} records (got ${records.length})`)
    } finally {
      result.consumeMs = Date.now() - consumeStart
      result.records = records
      await consumer.disconnect()
    }

    // Offsets.
    result.byTimestamp = []
    for (const ts of opts.queryTs) {
      const offsets = await admin.fetchTopicOffsetsByTimestamp(opts.topic, ts)
      result.byTimestamp.push({ ts, offsets })
    }
    result.topicOffsets = await admin.fetchTopicOffsets(opts.topic)
  } finally {
    await admin.disconnect()
  }
  process.stdout.write(JSON.stringify(result) + '\n')
}

main().catch(err => {
  process.stderr.write(`kafkajs client failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
