// The TypeScript adapter's cost per tool call through `stallwatch serve`, beside the bare agent.
// The benchmark lives in the package (typescript/bench), where its imports resolve; build first:
//   cd typescript && npm ci && npm run build && cd .. && node benchmarks/ts_adapter_bench.mjs [steps] [rounds]
await import("../typescript/bench/adapter-cost.mjs");
