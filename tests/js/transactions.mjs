#!/usr/bin/env node
// kafkajs transactions against kipper, driven by tests/support/transactions.py.
//
//   node transactions.mjs produce --bootstrap B --transactional-id ID \
//                                 --plan '[{"commit": true, "writes": [["topic", "value"], ...]}, ...]'
//   node transactions.mjs consume --bootstrap B --topic T --isolation read_committed \
//                                 --count N [--settle-ms 1000] [--timeout-ms 60000]
//
// produce: a transactional producer (kafkajs `transactionalId`, idempotent, one request in
// flight) runs each transaction of the plan: send its writes to partition 0 of their topics
// (each send waits for the acknowledgement), then commit or abort. Prints {"ok": true}.
// consume: a consumer group of its own reads the topic from the beginning at the isolation
// level (kafkajs `readUncommitted`) until it has `count` records, then `settle-ms` more; prints
// {"values": [...]} in the order read.
import { newKafka, parseFlags } from './common.mjs'

function client (bootstrap) {
  return newKafka('kipper-kafkajs-txn-test', bootstrap, 8)
}

async function produce (args) {
  const plan = JSON.parse(args.plan)
  const producer = client(args.bootstrap).producer({
    transactionalId: args['transactional-id'],
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
  })
  await producer.connect()
  try {
    for (const txn of plan) {
      const transaction = await producer.transaction()
      try {
        for (const [topic, value] of txn.writes) {
          await transaction.send({ topic, acks: -1, messages: [{ value, partition: 0 }] })
        }
      } catch (err) {
        await transaction.abort()
        throw err
      }
      if (txn.commit) await transaction.commit()
      else await transaction.abort()
    }
  } finally {
    await producer.disconnect()
  }
  return { ok: true }
}

async function consume (args) {
  const count = parseInt(args.count, 10)
  const settleMs = parseInt(args['settle-ms'] || '1000', 10)
  const timeoutMs = parseInt(args['timeout-ms'] || '60000', 10)
  const consumer = client(args.bootstrap).consumer({
    groupId: `kipper-kafkajs-txn-${args.topic}-${args.isolation}-${process.pid}`,
    readUncommitted: args.isolation === 'read_uncommitted',
    maxWaitTimeInMs: 200,
    sessionTimeout: 10000,
    rebalanceTimeout: 10000,
    heartbeatInterval: 1000,
    allowAutoTopicCreation: false,
  })
  const values = []
  let enough
  const gotEnough = new Promise(resolve => { enough = resolve })
  if (count === 0) enough()
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [args.topic], fromBeginning: true })
    await consumer.run({
      eachMessage: async ({ message }) => {
        values.push(message.value === null ? null : message.value.toString())
        if (values.length >= count) enough()
      },
    })
    let timer
    const timedOut = new Promise(resolve => { timer = setTimeout(resolve, timeoutMs) })
    await Promise.race([gotEnough, timedOut])
    clearTimeout(timer)
    await new Promise(resolve => setTimeout(resolve, settleMs))
  } finally {
    await consumer.disconnect()
  }
  return { values }
}

async function main () {
  const [command, ...rest] = process.argv.slice(2)
  const args = parseFlags(rest)
  const commands = { produce, consume }
  if (!(command in commands)) throw new Error(`unknown command ${command}`)
  process.stdout.write(JSON.stringify(await commands[command](args)) + '\n')
}

main().catch(err => {
  process.stderr.write(`kafkajs transactions failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
