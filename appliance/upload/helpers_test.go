package upload

import (
	"context"
	"log/slog"
	"testing"
	"time"

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
