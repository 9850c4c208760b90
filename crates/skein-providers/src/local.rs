/*!
The embedded local model as a backend: one [`LocalModel`] per GGUF file per
process, loaded on first use and shared by every caller (loading takes a
moment and the model's memory is mapped once).
*/

use skein_local::{LocalConfig, LocalError, LocalModel, SMOLLM2, model_path};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The shared model for the GGUF at `path` (default: SmolLM2 from the
/// models directory, or `SKEIN_MODEL_PATH`).
pub fn shared(path: Option<&Path>) -> Result<Arc<LocalModel>, LocalError> {
    static MODELS: OnceLock<Mutex<HashMap<PathBuf, Arc<LocalModel>>>> = OnceLock::new();
    let path = match path {
        // A path the user named: the advice about the embedded model's
        // download does not apply to it.
        Some(path) if !path.is_file() => {
            return Err(LocalError::Missing {
                path: path.to_path_buf(),
                hint: "`local:PATH` needs the path of a GGUF model file: check it".into(),
            });
        }
        Some(path) => path.to_path_buf(),
        None => model_path(&SMOLLM2).ok_or_else(|| LocalError::Missing {
            path: PathBuf::from(SMOLLM2.file_name),
            hint: "cannot find a cache directory: set SKEIN_MODELS_DIR or SKEIN_MODEL_PATH".into(),
        })?,
    };
    let mut models = MODELS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(model) = models.get(&path) {
        return Ok(model.clone());
    }
    let model = Arc::new(LocalModel::load(LocalConfig::new(path.clone()))?);
    models.insert(path, model.clone());
    Ok(model)
}
