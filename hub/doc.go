// Package hub pulls model files from the Hugging Face Hub into the Hub's
// own cache, as llama.cpp's -hf does: a reference "org/repo[:quant]" is
// resolved through the Hub's API to the GGUF file (all parts of a split
// GGUF) whose name carries the quantisation, each file is downloaded with
// resume after an interruption and checked against the SHA-256 the Hub
// publishes, and the files land in the layout huggingface_hub uses
// (models--org--repo/blobs, snapshots/COMMIT, refs), so other tools share
// them and an offline run finds them.
//
// The package knows HTTP and files, not models: what it returns is a path
// for the caller to open.
package hub
