export {
  type CallDecision,
  type ClientOptions,
  type Effect,
  Run,
  type RunView,
  StallwatchClient,
  StallwatchRequestError,
  type StartOptions,
  type Status,
  type StopView,
  type ToolSpec,
} from "./client.js";
export { Guard, type GuardOptions, type ModelTurn, instructionsText, refusalText } from "./guard.js";
export type { components, paths } from "./openapi.js";
