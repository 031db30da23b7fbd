#!/usr/bin/env node
// kafkajs's admin client against a kipper cluster of 4 brokers, driven by
// tests/system/test_reassignment.py.
//
//   node admin.mjs --bootstrap 127.0.0.1:9092 --topic T
//
// Creates the topic with a manual replica assignment (partition 0 on [3, 1], 1 on [2, 0]),
// adds partition 2 on [1, 3] (CreatePartitions with assignments), sets retention.ms with
// AlterConfigs, describes the topic's and broker 0's configs with synonyms, moves partition 0
// to [0, 2] (AlterPartitionReassignments) and lists the reassignments until none is left,
// then describes the cluster. Prints one JSON document on stdout; the Python test checks it.
import kafkajs from 'kafkajs'
import { newKafka, parseFlags } from './common.mjs'

const { ConfigResourceTypes } = kafkajs

const RETENTION_MS = '3600000'
const DEADLINE_MS = 30000

async function placement (admin, topic) {
  const { topics: [{ partitions }] } = await admin.fetchTopicMetadata({ topics: [topic] })
  return partitions
    .map(({ partitionId, replicas, isr }) => ({ partition: partitionId, replicas, isr }))
    .sort((a, b) => a.partition - b.partition)
}

async function main () {
  const args = parseFlags(process.argv.slice(2))
  for (const required of ['bootstrap', 'topic']) {
    if (args[required] === undefined) throw new Error(`missing --${required}`)
  }
  const topic = args.topic
  const admin = newKafka('kipper-kafkajs-admin-test', args.bootstrap).admin()
  await admin.connect()
  const result = {}
  try {
    result.created = await admin.createTopics({
      topics: [{ topic, replicaAssignment: [{ partition: 0, replicas: [3, 1] },
                                             { partition: 1, replicas: [2, 0] }] }],
      waitForLeaders: true,
    })
    await admin.createPartitions({ topicPartitions: [{ topic, count: 3, assignments: [[1, 3]] }] })
    result.created_placement = await placement(admin, topic)

    await admin.alterConfigs({
      validateOnly: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic,
                    configEntries: [{ name: 'retention.ms', value: RETENTION_MS }] }],
    })
    const described = await admin.describeConfigs({
      includeSynonyms: true,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic,
                    configNames: ['retention.ms', 'cleanup.policy'] },
                  { type: ConfigResourceTypes.BROKER, name: '0',
                    configNames: ['log.retention.hours', 'broker.id'] }],
    })
    result.configs = described.resources

    await admin.alterPartitionReassignments({
      topics: [{ topic, partitionAssignment: [{ partition: 0, replicas: [0, 2] }] }],
    })
    // Every answer until the reassignment is over (its first ones may show it in progress).
    result.listed = []
    const deadline = Date.now() + DEADLINE_MS
    for (;;) {
      const { topics } = await admin.listPartitionReassignments({
        topics: [{ topic, partitions: [0, 1, 2] }],
      })
      result.listed.push(topics)
      if (topics.length === 0 || Date.now() > deadline) break
      await new Promise(resolve => setTimeout(resolve, 100))
    }
    // The metadata follows the controller's record: wait until it shows the move.
    do {
      result.reassigned_placement = await placement(admin, topic)
      const { replicas, isr } = result.reassigned_placement[0]
      if (replicas.join() === '0,2' && isr.length === 2) break
      await new Promise(resolve => setTimeout(resolve, 100))
    } while (Date.now() < deadline)

    result.cluster = await admin.describeCluster()
  } finally {
    await admin.disconnect()
  }
  process.stdout.write(JSON.stringify(result) + '\n')
}

main().catch(e => {
  process.stderr.write(`${e.stack || e}\n`)
  process.exit(1)
})
