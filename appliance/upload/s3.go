package upload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// S3Options are storage.s3.
type S3Options struct {
	Bucket, Region, Endpoint string
	PathStyle                bool
	// AccessKeyID and SecretAccessKey (with SessionToken) are static
	// credentials; empty falls through to the SDK's default chain
	// (environment, shared credentials file, instance role).
	AccessKeyID, SecretAccessKey, SessionToken string
	SSE, KMSKeyID, StorageClass                string
	// Timeout bounds each request; zero means none.
	Timeout time.Duration
	// IfAbsent sends If-None-Match: * with every PUT, so that a PUT
	// repeated after a crash (the object stored, the job file not yet
	// rewritten) stores nothing twice: the store's 412 means the object
	// is there. Only for keys unique to one recording ({callid} in the
	// template). A store that does not implement the condition (501) gets
	// plain PUTs from then on.
	IfAbsent bool
}

// S3 puts and gets recording objects in one bucket.
type S3 struct {
	o      S3Options
	client *s3.Client
	plain  atomic.Bool // the store refused If-None-Match
}

// NewS3 builds the client. It does not contact the store.
func NewS3(ctx context.Context, o S3Options) (*S3, error) {
	region := o.Region
	if region == "" {
		region = "us-east-1" // an endpoint without a region: any region signs
	}
	lo := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(region)}
	if o.AccessKeyID != "" {
		lo = append(lo, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, o.SessionToken)))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, fmt.Errorf("s3: %w", err)
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle
	})
	return &S3{o: o, client: client}, nil
}

func (s *S3) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.o.Timeout > 0 {
		return context.WithTimeout(ctx, s.o.Timeout)
	}
	return context.WithCancel(ctx)
}

// Put uploads the file at path as key, with the configured server-side
// encryption and storage class (omitted when empty).
func (s *S3) Put(ctx context.Context, key, path, contentType string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("s3 put %s: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("s3 put %s: %w", key, err)
	}
	in := &s3.PutObjectInput{Bucket: aws.String(s.o.Bucket), Key: aws.String(key), Body: f,
		ContentLength: aws.Int64(fi.Size()), ContentType: aws.String(contentType)}
	if s.o.SSE != "" {
		in.ServerSideEncryption = types.ServerSideEncryption(s.o.SSE)
		if s.o.SSE == string(types.ServerSideEncryptionAwsKms) {
			in.SSEKMSKeyId = aws.String(s.o.KMSKeyID)
		}
	}
	if s.o.StorageClass != "" {
		in.StorageClass = types.StorageClass(s.o.StorageClass)
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if s.o.IfAbsent && !s.plain.Load() {
		in.IfNoneMatch = aws.String("*")
	}
	_, err = s.client.PutObject(ctx, in)
	var re *awshttp.ResponseError
	switch {
	case err == nil:
		return nil
	case in.IfNoneMatch != nil && errors.As(err, &re) && re.HTTPStatusCode() == http.StatusPreconditionFailed:
		return nil // stored by an earlier attempt
	case in.IfNoneMatch != nil && errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotImplemented:
		s.plain.Store(true) // retried by the queue, unconditionally
	}
	return fmt.Errorf("s3 put %s: %w", key, err)
}

// ErrNoObject: the store has no such object.
var ErrNoObject = errors.New("no such object")

// Get opens the object key; the caller closes it.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.o.Bucket), Key: aws.String(key)})
	if err != nil {
		var nk *types.NoSuchKey
		if errors.As(err, &nk) {
			return nil, 0, fmt.Errorf("%w: %s", ErrNoObject, key)
		}
		return nil, 0, fmt.Errorf("s3 get %s: %w", key, err)
	}
	return out.Body, aws.ToInt64(out.ContentLength), nil
}
