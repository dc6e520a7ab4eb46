package upload

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"pbx/appliance/datadir"
	"pbx/appliance/upload/uploadtest"
)

const (
	testAccess = uploadtest.Access
	testSecret = uploadtest.Secret
	testBucket = uploadtest.Bucket
)

// s3Server is a versitygw with the client helpers the tests use.
type s3Server struct {
	*uploadtest.Server
	endpoint string
}

func startS3(t testing.TB) *s3Server {
	s := uploadtest.Start(t)
	return &s3Server{Server: s, endpoint: s.Endpoint}
}

func (s *s3Server) stop()                             { s.Stop() }
func (s *s3Server) start()                            { s.Restart() }
func (s *s3Server) object(key string) ([]byte, error) { return s.Object(key) }

func (s *s3Server) client(t testing.TB, o S3Options) *S3 {
	t.Helper()
	o.Bucket, o.Endpoint, o.PathStyle, o.AccessKeyID, o.SecretAccessKey = testBucket, s.endpoint, true, testAccess, testSecret
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	c, err := NewS3(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// readJob reads the job file at path.
func readJob(path string) (*Job, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return decodeJob(b)
}

// writeJob replaces the job file at path (as a crash or an operator would
// leave it).
func writeJob(path string, j *Job) error {
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	return datadir.WriteFile(path, append(b, '\n'), 0o640)
}
