#!/usr/bin/env node
// One consumer-group member run by kafkajs, driven by tests/system/test_consumer_groups.py (the kafkajs twin of
// tests/support/group_member.py, with the same output):
//
//   node group_member.mjs BOOTSTRAP TOPIC GROUP NAME
//
// prints "assigned <p>,<p>,..." after every rebalance, "record <partition> <offset> <value>"
// per record, and "closed" once the consumer has disconnected after SIGTERM.
// kafkajs commits resolved offsets on a timer, not when partitions are revoked, so every
// record's offset is committed before the next one is processed (autoCommitThreshold: 1):
// otherwise records consumed just before a rebalance would be consumed again.
import kafkajs from 'kafkajs'

const { Kafka, logLevel } = kafkajs
const [bootstrap, topic, group, name] = process.argv.slice(2)
const say = line => process.stdout.write(line + '\n')
const toStderr = () => ({ label, log }) => process.stderr.write(`${label} ${JSON.stringify(log)}\n`)

const kafka = new Kafka({
  clientId: name, brokers: bootstrap.split(','), logLevel: logLevel.WARN, logCreator: toStderr,
})
// kafkajs heartbeats (and so notices a rebalance) and stops only between fetches: short
// fetch waits keep both quick.
const consumer = kafka.consumer({
  groupId: group, heartbeatInterval: 500, sessionTimeout: 6000, maxWaitTimeInMs: 500,
})
consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
  const partitions = (payload.memberAssignment[topic] || []).sort((a, b) => a - b)
  say('assigned ' + partitions.join(','))
})

process.on('SIGTERM', async () => {
  await consumer.disconnect()
  say('closed')
  process.exit(0)
})

await consumer.connect()
await consumer.subscribe({ topics: [topic], fromBeginning: true })
await consumer.run({
  autoCommitThreshold: 1,
  eachMessage: async ({ partition, message }) => {
    say(`record ${partition} ${message.offset} ${message.value.toString()}`)
  },
})
