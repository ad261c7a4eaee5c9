/*
 * mezzo wire protocol: the one definition of every message.
 *
 * Processes talk in the actor style of the Mesos paper: every call is `oneway`,
 * and a reply is another oneway message travelling the other way on the same
 * duplex connection. A connection therefore carries calls of one service in
 * each direction, e.g. Master calls from a scheduler driver, Scheduler calls
 * back from the master.
 *
 * Frames are 4-byte big-endian length prefixes followed by a TBinaryProtocol
 * message (wire compatible with stock TFramedTransport clients).
 *
 * Regenerate the Python code with `make thrift`; a test checks that the
 * committed code matches this file.
 *
 * Collections have no default values on purpose: the Python generator of
 * Thrift 0.17 shares one mutable default object between all instances, so an
 * absent map or list is None and readers write `x or {}`.
 */

namespace py wire

/* ---------------------------------------------------------------- values */

/** An inclusive range of integers, e.g. ports 31000-32000. */
struct Range {
  1: required i64 begin,
  2: required i64 end,
}

/**
 * A bundle of resources. Scalars are carried in thousandths (milli-units):
 * cpus 0.5 is 500, mem 256 (MB) is 256000. Integer arithmetic keeps sums
 * exact; mezzo.Resources converts to and from user-facing numbers.
 */
struct Resources {
  1: map<string, i64> scalars,
  2: map<string, list<Range>> ranges,
}

struct FrameworkInfo {
  1: string name,
  2: string user = "",
  /** Empty on first registration; the master assigns it. */
  3: string framework_id = "",
  /** Weights, guarantees and priority levels may be configured per role. */
  4: string role = "*",
  5: string hostname = "",
  /** Seconds the master keeps the framework's tasks after its scheduler disconnects. */
  6: double failover_timeout = 0.0,
  /** What the framework can handle. "PARTITION_AWARE": tasks on an agent that falls
      silent become TASK_UNREACHABLE rather than TASK_LOST, and are kept (and reported
      again) if the agent comes back. Unknown names are ignored. */
  7: list<string> capabilities = [],
}

struct AgentInfo {
  /** Empty on first registration; the master assigns it. */
  1: string agent_id = "",
  2: string hostname,
  3: i32 port,
  4: Resources resources,
  5: map<string, string> attributes,
  /** HOST:PORT where peers reach the agent (agent.advertise). Empty: the master takes
      the address the agent's connection comes from, with ``port``. */
  6: string address = "",
}

struct Offer {
  1: string offer_id,
  2: string framework_id,
  3: string agent_id,
  4: string hostname,
  5: Resources resources,
  6: map<string, string> attributes,
  /** Executors of this framework already running on the agent. */
  7: list<string> executor_ids,
  /**
   * How much of this offer long tasks (TaskInfo.long) may still use (paper §4.4):
   * the agent's long-task bound (master.long_task_fraction of it) minus what its long
   * tasks hold, within the offer. Unset: long tasks are not bounded.
   */
  8: optional Resources long_task_room,
}

struct CommandInfo {
  /** With shell (the default) run by /bin/sh -c; otherwise value is the program. */
  1: string value,
  2: list<string> arguments,
  3: bool shell = true,
  4: map<string, string> environment,
  /**
   * The unix user the command runs as; empty: FrameworkInfo.user, and "nobody" when
   * that is empty too. The master checks it against the run_tasks ACL; an agent
   * running as root switches to it (agent.switch_user).
   */
  5: string user = "",
}

struct ExecutorInfo {
  1: string executor_id,
  2: CommandInfo command,
  3: Resources resources,
  4: string name = "",
  5: string framework_id = "",
}

struct TaskInfo {
  1: string task_id,
  2: string name = "",
  3: string agent_id,
  4: Resources resources,
  /** Exactly one of command (built-in command executor) and executor is set. */
  5: optional CommandInfo command,
  6: optional ExecutorInfo executor,
  7: optional binary data,
  8: map<string, string> labels,
  /**
   * A long task (paper §4.4): it may only use the long-task room of its offer
   * (Offer.long_task_room). A task not marked long that runs past the master's
   * short_task_max is revoked.
   */
  9: bool long = false,
}

enum TaskState {
  TASK_STAGING = 0,
  TASK_STARTING = 1,
  TASK_RUNNING = 2,
  TASK_KILLING = 3,
  TASK_FINISHED = 4,
  TASK_FAILED = 5,
  TASK_KILLED = 6,
  TASK_ERROR = 7,
  TASK_DROPPED = 8,
  TASK_LOST = 9,
  TASK_UNREACHABLE = 10,
  TASK_GONE = 11,
  TASK_UNKNOWN = 12,
}

struct TaskStatus {
  1: string task_id,
  2: TaskState state,
  /** Human-readable explanation; always set for failures. */
  3: string message = "",
  /** Machine-readable reason code, e.g. "invalid_resources", "executor_exited". */
  4: string reason = "",
  /** "master", "agent" or "executor". */
  5: string source = "",
  6: string agent_id = "",
  7: string executor_id = "",
  8: string framework_id = "",
  /**
   * Identifies one update for acknowledgement and de-duplication. Empty for
   * updates the master makes itself (validation errors), which need no ack.
   */
  9: string uuid = "",
  10: double timestamp = 0.0,
  11: optional i32 exit_code,
  12: optional binary data,
}

/** A task an agent holds, as it reports it when re-registering. */
struct RunningTask {
  1: string framework_id,
  2: TaskInfo task,
  /** The latest status the agent has for it (unset before the first one). */
  3: optional TaskStatus latest,
}

/**
 * How the master wants a task killed, when it is not simply its framework asking
 * (revocation, paper §3.3). Unset fields keep the agent's own behaviour.
 */
struct KillPolicy {
  /** Seconds between asking the task to stop and killing its process tree (or its
      whole executor); unset: the agent's kill_grace_period. */
  1: optional double grace_seconds,
  /** Reason code the task's TASK_KILLING and TASK_KILLED updates carry, e.g. "revoked". */
  2: string reason = "",
  /** Why, for people: prefixed to those updates' messages. */
  3: string message = "",
}

/** Per-decline filter: do not re-offer these resources for refuse_seconds. */
struct Filters {
  1: double refuse_seconds = 5.0,
}

/**
 * Persistent framework filters (the paper's two): evaluated on the master
 * before offering; a resource failing one is treated as declined.
 */
struct FrameworkFilters {
  /** Only offer these agents (by id or hostname). Unset: any agent. */
  1: optional list<string> agents,
  /** Only offer an agent with at least this much free. Unset: no minimum. */
  2: optional Resources min_free,
}

/* -------------------------------------------------------------- services */

/** Calls the master receives: from scheduler drivers, agents and tools. */
service Master {
  // -- from scheduler drivers
  oneway void register_framework(1: FrameworkInfo framework),
  oneway void unregister_framework(1: string framework_id),
  /** The paper's replyToOffer: launch tasks on the offers; the unused rest gets filters. */
  oneway void launch_tasks(1: string framework_id, 2: list<string> offer_ids,
                           3: list<TaskInfo> tasks, 4: Filters filters),
  oneway void decline_offer(1: string framework_id, 2: list<string> offer_ids,
                            3: Filters filters),
  oneway void set_needs_offers(1: string framework_id, 2: bool needs_offers),
  oneway void set_filters(1: string framework_id, 2: FrameworkFilters filters),
  oneway void kill_task(1: string framework_id, 2: string task_id),
  oneway void acknowledge_status_update(1: string framework_id, 2: string agent_id,
                                        3: string task_id, 4: string uuid),
  /** Empty statuses: implicit reconciliation of every task of the framework. */
  oneway void reconcile_tasks(1: string framework_id, 2: list<TaskStatus> statuses),
  oneway void framework_to_executor(1: string framework_id, 2: string agent_id,
                                    3: string executor_id, 4: binary data),
  oneway void request_guaranteed_share(1: string framework_id, 2: i64 request_id),

  // -- from agents
  oneway void register_agent(1: AgentInfo agent),
  /**
   * After a lost connection or a master failover. frameworks: the FrameworkInfo
   * of every framework with tasks or executors here, so that a new master knows
   * their failover timeouts before their schedulers come back.
   */
  oneway void reregister_agent(1: AgentInfo agent, 2: list<RunningTask> tasks,
                               3: list<ExecutorInfo> executors, 4: list<FrameworkInfo> frameworks),
  oneway void status_update(1: TaskStatus status),
  oneway void executor_exited(1: string agent_id, 2: string framework_id,
                              3: string executor_id, 4: i32 exit_status, 5: string message),
  oneway void executor_to_framework(1: string agent_id, 2: string framework_id,
                                    3: string executor_id, 4: binary data),
  /**
   * The answer to Agent.ping (the agent, every agent on the connection, is alive)
   * and to Scheduler.ping (the scheduler is alive).
   */
  oneway void pong(),
  /**
   * Resource usage of the agent's containers, measured by its isolators: a JSON
   * list of {framework_id, executor_id, container_id, tasks, statistics}, sent every
   * agent.statistics_interval while any isolator measures something.
   */
  oneway void container_statistics(1: string agent_id, 2: string statistics_json),
  /**
   * The answer to Agent.files_request: status is an HTTP status (200, or 400, 403,
   * 404 with a JSON {"error", "status"} body); body is JSON (browse, read) or the raw
   * bytes asked for (download). Matched by request_id to the agent that was asked.
   */
  oneway void files_reply(1: i64 request_id, 2: i32 status, 3: binary body),

  // -- from tools (mezzo state)
  oneway void request_state(1: i64 request_id),
  /** Counters only (messages, cycles, CPU, memory): cheap at any cluster size. */
  oneway void request_metrics(1: i64 request_id),
  /**
   * An operator ends a framework (mezzo teardown): its tasks are killed and its id
   * refused from then on. Answered Tool.done, or Tool.error (unknown framework, or
   * the teardown_frameworks ACL).
   */
  oneway void teardown_framework(1: i64 request_id, 2: string framework_id),
}

/** Calls a scheduler driver receives from the master. */
service Scheduler {
  oneway void registered(1: string framework_id, 2: string master),
  oneway void reregistered(1: string framework_id, 2: string master),
  oneway void resource_offers(1: list<Offer> offers),
  oneway void offer_rescinded(1: string offer_id),
  oneway void status_update(1: TaskStatus status),
  oneway void framework_message(1: string agent_id, 2: string executor_id, 3: binary data),
  oneway void agent_lost(1: string agent_id),
  oneway void executor_lost(1: string agent_id, 2: string executor_id, 3: i32 exit_status),
  oneway void guaranteed_share(1: i64 request_id, 2: Resources guarantee),
  /** A fatal framework error; the driver aborts. */
  oneway void error(1: string message),
  /**
   * This master is not the leader (a standby, or demoted): the call was not
   * applied. leader is the current leader's address, empty if unknown. The
   * master closes the connection after this; the driver finds the leader again.
   */
  oneway void not_leader(1: string leader),
  /**
   * Health check of a connection silent for master.framework_ping_interval: answer
   * with Master.pong. One silent for master.framework_idle_timeout is closed and its
   * framework treated as disconnected (its failover_timeout applies).
   */
  oneway void ping(),
}

/** Calls an agent receives: from the master and from its executors. */
service Agent {
  // -- from the master
  oneway void registered(1: string agent_id),
  oneway void reregistered(1: string agent_id),
  oneway void run_task(1: FrameworkInfo framework, 2: TaskInfo task),
  /** kill: unset when the framework asked; set by the master's own kills (revocation). */
  oneway void kill_task(1: string framework_id, 2: string task_id, 3: KillPolicy kill),
  oneway void status_update_acknowledged(1: string framework_id, 2: string task_id,
                                         3: string uuid),
  oneway void framework_to_executor(1: string framework_id, 2: string executor_id,
                                    3: binary data),
  oneway void shutdown_framework(1: string framework_id),
  /** Registration refused (bad resources, ...): the agent logs it and exits. */
  oneway void error(1: string message),
  /** Health check: answer with Master.pong. An agent silent too long is declared lost. */
  oneway void ping(),
  /** As Scheduler.not_leader: this master does not lead; find the leader and register there. */
  oneway void not_leader(1: string leader),
  /**
   * The cluster declared this agent lost (its tasks were reported TASK_LOST), so
   * it may not come back under its id: it kills what it runs, without reporting
   * those tasks again, and registers as a new agent.
   */
  oneway void reregistration_refused(1: string agent_id, 2: string message),
  /**
   * The master proxies its /files/* HTTP API for a caller: operation is "browse",
   * "read" (offset, length: as /files/read) or "download" (raw bytes from offset, at
   * most length). Answered Master.files_reply(request_id, ...); see mezzo.agent.files.
   */
  oneway void files_request(1: i64 request_id, 2: string operation, 3: string path,
                            4: i64 offset, 5: i64 length),

  // -- from tools (mezzo state --agent)
  /** Answered with Tool.statistics: the usage of every container, measured now. */
  oneway void request_statistics(1: i64 request_id),

  // -- from executors
  /** token: MEZZO_EXECUTOR_TOKEN, which the agent gave this executor's process alone;
      a registration without it is refused (another process could otherwise register
      first and be handed the executor's tasks). */
  oneway void register_executor(1: string framework_id, 2: string executor_id, 3: string token),
  oneway void executor_status_update(1: TaskStatus status),
  oneway void executor_to_framework(1: string framework_id, 2: string executor_id,
                                    3: binary data),
}

/** Calls an executor receives from its agent. */
service Executor {
  oneway void registered(1: ExecutorInfo executor, 2: FrameworkInfo framework,
                         3: AgentInfo agent),
  oneway void launch_task(1: TaskInfo task),
  oneway void kill_task(1: string task_id),
  oneway void framework_message(1: binary data),
  oneway void status_update_acknowledged(1: string task_id, 2: string uuid),
  oneway void shutdown(),
}

/** Calls a tool (mezzo state) receives from the master. */
service Tool {
  oneway void state(1: i64 request_id, 2: string state_json),
  oneway void metrics(1: i64 request_id, 2: string metrics_json),
  /** An agent's answer to Agent.request_statistics (JSON, as Master.container_statistics). */
  oneway void statistics(1: i64 request_id, 2: string statistics_json),
  /** The request was refused (the master's ACLs, an unknown id); message says why. */
  oneway void error(1: i64 request_id, 2: string message),
  /** The request (teardown_framework) was carried out; message says what was done. */
  oneway void done(1: i64 request_id, 2: string message),
}
