/*!
Admission: each backend admits at most its capacity of runs at once. A run
holds its permit through generation, validation and repair, and drops it
before it returns (a streamed run: when its stream ends). No application
code runs while a permit is held (DESIGN.md invariant 9), so a caller can
start another run on the same backend right after one returns, even at
capacity one.
*/

use crate::config::BackendDef;
use crate::error::{EngineError, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// What a run does when its backend is at capacity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WhenBusy {
    /// Wait for a permit (cancellable). The default.
    #[default]
    Wait,
    /// Fail at once with [`EngineError::Capacity`].
    Fail,
}

/// One semaphore per backend.
#[derive(Default)]
pub(crate) struct Admission {
    semaphores: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Admission {
    fn semaphore(&self, backend: &BackendDef) -> Arc<Semaphore> {
        self.semaphores
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(backend.name.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(backend.capacity.max(1))))
            .clone()
    }

    /// A permit for `backend`, waiting or failing as `when_busy` says.
    pub(crate) async fn admit(
        &self,
        backend: &BackendDef,
        when_busy: WhenBusy,
        cancel: &CancellationToken,
    ) -> Result<OwnedSemaphorePermit> {
        let semaphore = self.semaphore(backend);
        let busy = || EngineError::Capacity {
            backend: backend.name.clone(),
            capacity: backend.capacity.max(1),
        };
        match when_busy {
            WhenBusy::Fail => semaphore.try_acquire_owned().map_err(|_| busy()),
            WhenBusy::Wait => tokio::select! {
                permit = semaphore.acquire_owned() => permit.map_err(|_| busy()),
                () = cancel.cancelled() => Err(EngineError::Cancelled {
                    run: None,
                    partial: String::new(),
                }),
            },
        }
    }

    /// Permits free right now for `backend` (for tests and inspection).
    pub(crate) fn available(&self, backend: &BackendDef) -> usize {
        self.semaphore(backend).available_permits()
    }
}
