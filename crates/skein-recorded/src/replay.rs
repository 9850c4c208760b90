/*!
Replays: a selection of recorded turns re-sent with one change, each
replayed turn a counterfactual branch of the original, judged by the
comparators of [`crate::compare`].

A turn is a request (the message a model answered, with the history
before it) and everything the model and the tools said until the next
user message: one run, or a tool loop, whether skein's own loop ran it or
a client of the recording proxy sent each step. Its **recorded request**
is the first run's: the thread up to that message, the run's annotations,
the tools it offered and its options (what the engine sent; for a proxied
turn, the body the client sent was mapped to exactly these). A replay
re-sends it with only its [`Change`] applied (another model or options, a
system prompt, tools removed, added or swapped, sources removed or
replaced by tag),
through the turn service like every other surface.

Tool calls are answered from the recording: a call of the same tool with
value-equal arguments ([`skein_providers::http::arguments_value`], the
proxy's matching) made in the original turn gets the result recorded for
it, call by call through a multi-call loop. A call the recording lacks
stops the turn as *diverged* ("asked for X(args)") unless that tool was
named live ([`ReplayPlan::live_tools`]); no tool runs otherwise.

Where it lands: a replayed turn's request shares every node the change
left alone (a model change alone shares all of them, so its answer is a
sibling of the original answer), its answer and runs are stored with its
row of the replay record ([`skein_store::ReplayTurn`]) in one transaction,
and no conversation is created: a replay of a week of traffic does not
flood `skein list`. It is found from the original turn
([`skein_store::Store::replay_turns_of_node`]) and from the replay. The
same turn replayed twice on a deterministic model reaches the same node
(content addressing): no second branch.

Running: [`Replayer::start`] reads the selection one conversation at a
time (threads are dropped as soon as their turns are listed) and stores
the replay with one pending row per turn; [`Replayer::run`] claims rows
a few at a time (the model's capacity, at least 8) under a lease and
replays up to the model's capacity at once. While it runs, a heartbeat
task renews the lease of every turn the worker holds (running or waiting
its turn in the batch) every third of a lease, in one store write
([`skein_store::Store::renew_replay_leases`]), so a turn is sent once
however long its calls take; and a worker is never handed back a turn it
holds. A turn whose worker stopped renewing (killed, or stalled past its
lease) is taken over by another, which notes it in the turn's detail
(`reclaimed_from`, `reclaims`) and says so in a warning; the first
worker's result, should it come, is dropped. So several workers
(processes, machines, on PostgreSQL) share one replay and a killed one is
resumed by running it again: finished turns are never redone, and a turn
is recorded whole or not at all. A turn that cannot be judged (a judge's
call fails, an embedder errs) is failed with the reason, its replayed
answer and runs kept, and the replay goes on.

Reporting: [`ReplayReport`] is what every surface shows of a replay (its
turns with the questions re-sent and their conversations' names,
comparators and costs, and what changed in words), [`ReplayOverview`] a
listing's row, and [`ReplayUsage`] what it used.

Where each job lives: `select` (the [`Selection`] and reading it), `plan`
(the [`Change`], [`ReplayPlan`], [`plan_of`]), `worker` (the
[`Replayer`]: starting a replay, the lease loop and its heartbeat,
[`Progress`]), `turn` (one claimed turn, re-sent, judged and finished),
`original` (the original turn as its replay needs it), `tools` (tool
calls answered from the recording), `outcome` (how a turn ended, before it
is written), `report` and `overview` (what surfaces show).
*/

mod original;
mod outcome;
mod overview;
mod plan;
mod report;
mod select;
mod tools;
mod turn;
mod worker;

pub(crate) use original::original_turn;
pub use overview::ReplayOverview;
pub use plan::{Change, PromptVersion, ReplayPlan, plan_of};
pub use report::{
    CostDelta, ModelTotals, ModelUsage, ReplayReport, ReplayUsage, TurnReport, TurnUsage,
    result_of, turns_of_replay,
};
pub use select::{CaseTurn, Selection, request_of_turn};
pub use worker::{DEFAULT_LEASE_MS, Progress, Replayer};
