export { connect, type ConnectOptions, type TlsFiles } from './connect';
export { QueueKeys, type JobId } from './keys';
export {
  Queue, NotReplicated, parseDurability, MAX_BATCH, DEFAULT_MAX_PAYLOAD, generateId, newToken,
  type QueueOptions, type EnqueueOptions, type NewJob, type Enqueued, type JobOptions, type QueueSettings, type FailMode, type LeaseRef, type Durability, type UniqueKey,
} from './queue';
export * as replies from './replies';
export { callScript, SCRIPTS, type ScriptName, type Client, type Reply, type Arg } from './scripts';
export { Worker, DeadLetter, LeaseLost, isTransient, type Job, type Handler, type WorkerOptions, type WorkerCounters, type Logger } from './worker';
