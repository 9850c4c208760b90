/*!
Forks: a new recorded chat that continues from turn `k`, either from its
original reply or from a rerun's counterfactual answer. The original chat
never changes.

From a rerun, the fork's history is the rerun's request (turn `k`'s
recorded request minus the ablated parts, so earlier turns keep their
recorded messages and replies) followed by the rerun's answer, and the
rerun's removals carry forward into every later turn and probe of the fork.

Provenance is enforced: the rerun must belong to this chat and this turn,
with the answer and the removals it actually had. In memory the chat
remembers each rerun it produced (its turn, answer node and removed
sources); with a store, the persisted rerun record is checked too, so
provenance survives a restart. A result that matches neither is refused: a
`RerunResult` is plain data whose fields a caller can change, and a fork
that carried removals its rerun never made would contradict its own
history in every later turn.
*/

use crate::chat::RecordedChat;
use crate::error::{RecordedError, Result};
use crate::rerun::RerunResult;
use crate::source::Ablation;
use skein_core::{NodeId, Thread};
use skein_store::{Origin, RerunId, StoreError};
use std::collections::BTreeSet;

impl RecordedChat {
    /// A new chat continuing from turn `k`: from the rerun's answer when
    /// `from_rerun` is given, otherwise from the original reply.
    pub async fn fork(&self, k: usize, from_rerun: Option<&RerunResult>) -> Result<RecordedChat> {
        let turn = self.turn(k)?.clone();
        let Some(rerun) = from_rerun else {
            return self
                .spawn(turn.thread.clone(), turn.removed.clone(), turn.node(), None)
                .await;
        };
        let refuse = |reason: String| RecordedError::Provenance {
            rerun: rerun.id.to_string(),
            reason: format!("{reason} (forking turn {k})"),
        };
        if rerun.chat != self.id() {
            return Err(refuse(format!(
                "it was produced by another chat ({}), not this one ({})",
                rerun.chat,
                self.id()
            )));
        }
        if rerun.turn != k {
            return Err(refuse(format!(
                "it re-ran turn {}, not turn {k}",
                rerun.turn
            )));
        }
        let answer = rerun
            .samples
            .first()
            .map(|s| s.thread.clone())
            .ok_or_else(|| refuse("it has no samples".into()))?;
        let answer_head = answer
            .head_id()
            .ok_or_else(|| refuse("its answer is empty".into()))?;
        self.check_provenance(k, &rerun.id, answer_head, &rerun.removed)
            .await?;
        if rerun.turn_node != turn.node() {
            return Err(refuse("it names another reply node than the turn's".into()));
        }
        let mut removed = self.removed.clone();
        removed.extend(rerun.removed.iter().cloned());
        self.spawn(answer, removed, answer_head, Some(rerun.id.clone()))
            .await
    }

    /// Fork from a stored rerun by its id (what `skein fork --from-rerun`
    /// needs): the rerun record decides the turn; it must belong to this
    /// chat's conversation.
    pub async fn fork_from_rerun(&self, rerun: &RerunId) -> Result<RecordedChat> {
        let store = self
            .config
            .store
            .clone()
            .ok_or(RecordedError::NoStore("forking from a stored rerun"))?;
        let record = match store.nonblocking().rerun(rerun).await {
            Ok(record) => record,
            Err(StoreError::RerunNotFound(_)) => {
                return Err(RecordedError::Provenance {
                    rerun: rerun.to_string(),
                    reason: "no such rerun is recorded".into(),
                });
            }
            Err(other) => return Err(other.into()),
        };
        let k = record.turn as usize;
        let answer_head = record
            .answer_head
            .ok_or_else(|| RecordedError::Provenance {
                rerun: rerun.to_string(),
                reason: "its record has no answer".into(),
            })?;
        self.check_provenance(k, rerun, answer_head, &record.ablation)
            .await?;
        let turn = self.turn(k)?.clone();
        if record.turn_node != turn.node() {
            return Err(RecordedError::Provenance {
                rerun: rerun.to_string(),
                reason: format!("it re-ran another reply than this chat's turn {k}"),
            });
        }
        let answer = store.nonblocking().load_thread(answer_head).await?;
        let mut removed = self.removed.clone();
        removed.extend(record.ablation);
        self.spawn(answer, removed, answer_head, Some(rerun.clone()))
            .await
    }

    /// The rerun `id` was produced by this chat for turn `k` with this
    /// answer and these removals: in memory, or in the store's record.
    async fn check_provenance(
        &self,
        k: usize,
        id: &RerunId,
        answer_head: NodeId,
        removed: &[String],
    ) -> Result<()> {
        let refuse = |reason: String| RecordedError::Provenance {
            rerun: id.to_string(),
            reason: format!("{reason} (forking turn {k})"),
        };
        let claimed: BTreeSet<&str> = removed.iter().map(String::as_str).collect();
        let differs = |actual: &[String]| {
            let actual: BTreeSet<&str> = actual.iter().map(String::as_str).collect();
            (actual != claimed).then(|| {
                refuse(format!(
                    "it claims to have removed [{}], but it removed [{}]",
                    claimed.iter().copied().collect::<Vec<_>>().join(", "),
                    actual.into_iter().collect::<Vec<_>>().join(", ")
                ))
            })
        };
        if let Some(stamp) = self.reruns.get(id) {
            if stamp.turn != k {
                return Err(refuse(format!("this chat ran it for turn {}", stamp.turn)));
            }
            if stamp.answer_head != answer_head {
                return Err(refuse(
                    "its answer is not the one this chat recorded for it".into(),
                ));
            }
            if let Some(refused) = differs(&stamp.removed) {
                return Err(refused);
            }
        }
        let (Some(store), Some(conversation)) = (&self.config.store, self.conversation()) else {
            return match self.reruns.contains_key(id) {
                true => Ok(()),
                false => Err(refuse("this chat never produced it".into())),
            };
        };
        let record = match store.nonblocking().rerun(id).await {
            Ok(record) => record,
            Err(StoreError::RerunNotFound(_)) => {
                return Err(refuse(
                    "this chat never produced it (no such rerun is recorded)".into(),
                ));
            }
            Err(other) => return Err(other.into()),
        };
        if &record.conversation != conversation {
            return Err(refuse(format!(
                "it belongs to conversation {}, not this chat's {}",
                record.conversation, conversation
            )));
        }
        if record.turn as usize != k {
            return Err(refuse(format!(
                "it re-ran turn {}, not turn {k}",
                record.turn
            )));
        }
        if record.answer_head != Some(answer_head) {
            return Err(refuse("its answer is not the one recorded for it".into()));
        }
        if let Some(refused) = differs(&record.ablation) {
            return Err(refused);
        }
        Ok(())
    }

    async fn spawn(
        &self,
        history: Thread,
        removed: Ablation,
        node: NodeId,
        rerun: Option<RerunId>,
    ) -> Result<RecordedChat> {
        let origin = Origin {
            node: Some(node),
            conversation: self.conversation().cloned(),
            rerun,
        };
        RecordedChat::create(
            self.config.clone(),
            history,
            removed,
            None,
            Some(origin),
            true,
        )
        .await
    }
}
