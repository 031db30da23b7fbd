// Shared by the kafkajs scripts of tests/js.
import kafkajs from 'kafkajs'
import SnappyCodec from 'kafkajs-snappy'
import LZ4Codec from '@2l/kafkajs-lz4'
// Registers CompressionTypes.ZSTD on kafkajs itself. Its CommonJS build is broken
// (`__importDefault is not defined`), which is why these scripts are ES modules.
import '@sensejs/kafkajs-zstd-support'

const { CompressionTypes, CompressionCodecs, Kafka, logLevel } = kafkajs

// Every codec registered, so every script reads batches of any codec (a topic's
// compression.type may store them with another codec than the producer's).
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
CompressionCodecs[CompressionTypes.LZ4] = new LZ4Codec().codec

export const CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD,
}

// `--name value` pairs into an object; anything else is an error.
export function parseFlags (argv) {
  const args = {}
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || argv[i + 1] === undefined) {
      throw new Error(`bad argument list near ${argv[i]}`)
    }
    args[argv[i].slice(2)] = argv[i + 1]
  }
  return args
}

// kafkajs logs to stdout by default; keep stdout for the JSON result.
export const stderrLogCreator = () => ({ namespace, label, log }) => {
  const { message, ...extra } = log
  process.stderr.write(`[kafkajs ${label} ${namespace}] ${message} ${JSON.stringify(extra)}\n`)
}

// A client of the brokers of `bootstrap` (comma-separated), logging warnings to stderr.
export function newKafka (clientId, bootstrap, retries = 5) {
  return new Kafka({
    clientId,
    brokers: bootstrap.split(','),
    logLevel: logLevel.WARN,
    logCreator: stderrLogCreator,
    retry: { retries, initialRetryTime: 100 },
  })
}
