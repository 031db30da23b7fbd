// Shared by the kafkajs scripts of tests/js.

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
