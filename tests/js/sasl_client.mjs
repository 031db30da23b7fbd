#!/usr/bin/env node
// kafkajs over SASL_SSL, or over SSL with a client certificate (mutual TLS), driven by
// tests/system/test_sasl_ssl.py:
//
//   node sasl_client.mjs --bootstrap 127.0.0.1:9093 --topic T --count 20 --ca ca.pem \
//                        --mechanism scram-sha-512 --username admin --password secret
//   node sasl_client.mjs --bootstrap 127.0.0.1:9094 --topic T --count 20 --ca ca.pem \
//                        --cert client.pem --key client.key
//
// Produces `count` records (values v-0 .. v-<count-1>) to an existing topic, consumes them
// back with a consumer group from the beginning and prints {"values": [...]} on stdout.
import fs from 'node:fs'
import kafkajs from 'kafkajs'
import { parseFlags, stderrLogCreator } from './common.mjs'

const { Kafka, logLevel } = kafkajs

async function main () {
  const opts = parseFlags(process.argv.slice(2))
  const count = parseInt(opts.count, 10)
  const kafka = new Kafka({
    clientId: 'kipper-kafkajs-sasl-test',
    brokers: opts.bootstrap.split(','),
    ssl: opts.cert
      ? { ca: [fs.readFileSync(opts.ca, 'utf-8')], cert: fs.readFileSync(opts.cert, 'utf-8'),
          key: fs.readFileSync(opts.key, 'utf-8') }
      : { ca: [fs.readFileSync(opts.ca, 'utf-8')] },
    sasl: opts.cert
      ? undefined
      : { mechanism: opts.mechanism, username: opts.username, password: opts.password },
    logLevel: logLevel.WARN,
    logCreator: stderrLogCreator,
    retry: { retries: 5, initialRetryTime: 100 },
  })
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const messages = []
  for (let i = 0; i < count; i++) messages.push({ value: `v-${i}` })
  await producer.send({ topic: opts.topic, acks: -1, messages })
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: `kipper-kafkajs-${opts.topic}`, maxWaitTimeInMs: 200 })
  const values = []
  let finish
  const finished = new Promise(resolve => { finish = resolve })
  await consumer.connect()
  await consumer.subscribe({ topics: [opts.topic], fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ message }) => {
      values.push(message.value.toString())
      if (values.length >= count) finish()
    },
  })
  const timer = setTimeout(() => finish(), 60000)
  await finished
  clearTimeout(timer)
  await consumer.disconnect()
  process.stdout.write(JSON.stringify({ values }) + '\n')
}

main().catch(e => { process.stderr.write(`${e.stack || e}\n`); process.exit(1) })
