"""The domain's vocabulary: the words a config, a record and a report share (precisions,
serving formats, runtimes, objectives, protocols). Stdlib only; imports no other deploy
package, so every layer above the engine may use it."""
