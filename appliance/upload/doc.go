// Package upload is the recording upload queue: one JSON job file per
// recording under <dataDir>/uploads/pending/ (the job file is the truth,
// rewritten atomically after every attempt), two uploads at once, the
// audio first and then the sidecar, backoff from 30 seconds doubling to 30
// minutes with jitter, and after 7 days of failures (or when the local
// file vanished before it was uploaded, or the job file cannot be read)
// the job moves to uploads/failed/, is logged at error level, and nothing
// is deleted. The store is any S3-compatible service (aws-sdk-go-v2).
package upload
