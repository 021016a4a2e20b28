// Types of millrace.js, the Node.js SDK for millrace actions (CommonJS). Checked by
// `npm run types` (tsc): the examples and types/check.ts use the API through these types.
/// <reference types="node" />

/** A JSON value, as payloads and states travel. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A header value: text, bytes (Buffer; not UTF-8 travels as valueBase64), or none. */
export type HeaderValue = string | Buffer | Uint8Array | null;
export type Headers = Array<[string, HeaderValue]> | Record<string, HeaderValue>;

/** Deliveries written ahead to a handler run one at a time, declared in ready. */
export declare const WINDOW: number;
/** Deliveries a concurrent handler has in flight at most (128): more than a sidecar batch. */
export declare const CONCURRENT_WINDOW: number;

/** Throw to answer with abstain: the engine routes the item to the step's fallback. */
export declare class Abstain extends Error {
  constructor(reason?: unknown);
  readonly reason: string;
}
/** Throw to fail this attempt with a retryable error: the engine retries with backoff. */
export declare class Retryable extends Error {
  constructor(message?: string);
}
/** The config of hello does not fit opts.config; every item fails with it. */
export declare class ConfigError extends Error {
  constructor(message: string);
}
/** A state the engine would refuse: the item fails with this message, even if caught. */
export declare class StateError extends Error {
  constructor(message: string);
}

export interface OutputOptions {
  /** undefined keeps the item's key; a string or Buffer sets it. */
  key?: string | Buffer | Uint8Array | null;
  /** May be left out when the action has one outlet. */
  outlet?: string;
  headers?: Headers;
}
/** One output of mapKeyed or a keyed batch. */
export declare class Output<T = unknown> {
  constructor(value: T, opts?: OutputOptions);
  value: T;
  key: OutputOptions['key'];
  outlet: string | undefined;
  headers: Headers | undefined;
}
export declare function output<T>(value: T, opts?: OutputOptions): Output<T>;

export type LogFields = Record<string, unknown>;
/** Structured logging to stderr: one JSON object per line. */
export interface Log {
  bind(fields: LogFields): Log;
  write(level: string, msg: unknown, fields?: LogFields): void;
  debug(msg: unknown, fields?: LogFields): void;
  info(msg: unknown, fields?: LogFields): void;
  warn(msg: unknown, fields?: LogFields): void;
  error(msg: unknown, fields?: LogFields): void;
}
/** The action's logger; inside a handler its lines carry the delivery, item and attempt. */
export declare const log: Log;

/** MILLSTREAM_WORKDIR; outside the engine, a temporary folder removed at exit. */
export declare function workdir(): string;

/** One delivery. P is the payload's type, C the config's. */
export declare class Item<P = any, C = any> {
  protected constructor();
  /** The item line as decoded, unknown keys included. */
  readonly raw: Record<string, unknown>;
  readonly payload: P;
  readonly delivery: string;
  /** A string, a Buffer when it is not UTF-8 (keyBase64 on the wire), null when absent. */
  readonly key: string | Buffer | null;
  readonly headers: Array<[string, string | Buffer | null]>;
  /** The item's stable id, the same on every attempt. */
  readonly id: string;
  /** The attempt number, from 1. */
  readonly attempt: number;
  /** Pass it to any outside system the action changes. */
  readonly idempotencyKey: string;
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  /** Milliseconds since the epoch. */
  readonly timestamp: number;
  readonly inlet: string;
  readonly run: string;
  /** The config of hello, checked against opts.config when given. */
  readonly config: C;
  readonly vars: Record<string, unknown>;
  readonly workdir: string;
  /** The logger with this item's delivery, item and attempt. */
  readonly log: Log;
  /** Aborted when the engine cancels the delivery (its --timeout passed); pass it to fetch. */
  readonly signal: AbortSignal;
  /** The key's state: the JSON value last staged for it, undefined when none. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- any JSON value the action staged
  readonly state: any;
  /** Stages value as the key's new state (null deletes it); written when the handler returns. */
  setState(value: Json): void;
  /** Stages the deletion of the key's state. */
  clearState(): void;
  /** Records a custom measurement with this attempt: a finite number, labels of strings. */
  metric(name: string, value: number, labels?: Record<string, string | number | boolean>): void;
}

export type ConfigType = 'string' | 'integer' | 'memory-size' | 'number' | 'double' | 'boolean' | 'duration' | 'object' | 'array' | 'any';
/** A schema ({ minRooms: 'integer', greeting: { type: 'string', default: 'hi' } }) or a
 * function that validates hello's raw config and returns the config to use. */
export type ConfigSpec<C = any> =
  | Record<string, ConfigType | { type: ConfigType; default?: unknown }>
  | ((raw: Record<string, unknown>) => C);

export interface Options<C = any> {
  config?: ConfigSpec<C>;
  /** Deliveries in flight at most: WINDOW (64) one at a time, CONCURRENT_WINDOW (128) concurrent. */
  window?: number;
  /** Run deliveries at once (the default for an async function) or one at a time. */
  concurrent?: boolean;
}
export interface BatchOptions<C = any> extends Options<C> {
  /** Items in one batch at most (64). */
  size?: number;
  /** Milliseconds a partial batch waits for more items that come on lines (5). */
  linger?: number;
  /** Each result is an array of outputs, as mapKeyed's. */
  keyed?: boolean;
}

type MaybePromise<T> = T | PromiseLike<T>;
/** fn(payload, item): one output (a value; an Output to set key, outlet or headers). */
export type Handler<P = any, C = any> = (payload: P, item: Item<P, C>) => MaybePromise<unknown>;
/** fn(payload, item): zero or more outputs, each a value (the item's key) or an Output. */
export type KeyedHandler<P = any, C = any> = (payload: P, item: Item<P, C>) => MaybePromise<readonly unknown[] | null | undefined>;
/** fn(items): one result per item, in order: an output (keyed: an array), or an Error. */
export type BatchHandler<P = any, C = any> = (items: Array<Item<P, C>>) => MaybePromise<readonly unknown[]>;

/** Serves fn: one output per item, with the item's key. */
export declare function map<P = any, C = any>(fn: Handler<P, C>, opts?: Options<C>): void;
/** Serves fn: zero or more outputs per item. */
export declare function mapKeyed<P = any, C = any>(fn: KeyedHandler<P, C>, opts?: Options<C>): void;
/** Serves fn on batches of up to opts.size items. */
export declare function batch<P = any, C = any>(fn: BatchHandler<P, C>, opts?: BatchOptions<C>): void;
/** Checks hello's raw config against spec, as the SDK does; throws ConfigError. */
export declare function checkConfig<C = any>(spec: ConfigSpec<C> | null | undefined, raw: unknown): C;
