// Package store holds what agentbot keeps outside Temporal: the blob store
// (Blobs) for workspace snapshots and other large payloads, and the
// thread-to-session cache with event de-duplication.
//
// # Blobs
//
// Blobs is a bucket of keyed byte streams behind a gocloud.dev/blob URL,
// opened with OpenBlobs. Content is always streamed (NewWriter, NewReader,
// Copy); no method holds a whole blob in memory, except that a mem:// store
// is memory. A write becomes visible only when its writer's Close returns
// nil: readers see the previous version or nothing, never part of a write,
// and an aborted or canceled write leaves no trace under its key. A missing
// key gives an error matching ErrNotFound.
//
// The URLs:
//
//	file:///var/lib/agentbot/blobs
//	    A local directory, created if missing. The form is file:// plus an
//	    absolute path (three slashes on Unix, file:///C:/agentbot on
//	    Windows); a plain absolute path such as /var/lib/agentbot/blobs is
//	    accepted too. A host (file://blobs/x) or a relative path is refused
//	    rather than silently read as a different directory. No credentials.
//	    OpenBlobs adds fileblob's create_dir, no_tmp_dir and metadata=skip
//	    unless the URL sets them: a write goes to a temporary file next to
//	    its key and is renamed into place on Close, which is atomic because
//	    both are on the same filesystem (os.TempDir is often another one, or
//	    RAM), and no attribute side files are written (fileblob rewrites
//	    those in place, so a reader racing a writer could see a torn one).
//	mem://
//	    Process memory, empty when opened and gone at Close; every OpenBlobs
//	    call gets its own bucket. For tests and throwaway runs.
//	s3://my-bucket?region=eu-west-1
//	s3://my-bucket?endpoint=https://minio.internal:9000&use_path_style=true&region=us-east-1
//	    Amazon S3, or an S3-compatible store (MinIO, Ceph, R2) with
//	    endpoint and use_path_style. Credentials come from the AWS SDK's
//	    default chain: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
//	    AWS_SESSION_TOKEN; AWS_PROFILE with ~/.aws/config and
//	    ~/.aws/credentials; web identity (AWS_ROLE_ARN and
//	    AWS_WEB_IDENTITY_TOKEN_FILE, as EKS sets them); then the ECS task or
//	    EC2 instance role. The region comes from the URL or AWS_REGION.
//	gs://my-bucket
//	    Google Cloud Storage. Credentials are Application Default
//	    Credentials: the JSON file named by GOOGLE_APPLICATION_CREDENTIALS,
//	    else gcloud's application_default_credentials.json, else the
//	    GCE/GKE metadata server (Workload Identity).
//
// This package registers only the file and mem schemes (it imports
// gocloud.dev/blob/fileblob and memblob), so a program that never stores in
// the cloud links no cloud SDK. A program that accepts s3:// or gs:// URLs
// registers them by blank-importing gocloud.dev/blob/s3blob and
// gocloud.dev/blob/gcsblob, as cmd/worker does. OpenBlobs refuses any other
// scheme with an error that lists the registered ones. Both cloud SDKs use
// Go's HTTP defaults, so they honour HTTPS_PROXY, NO_PROXY and the system CA
// configuration (SSL_CERT_FILE, SSL_CERT_DIR).
//
// Snapshots of a session live under SnapshotPrefix(sessionID), one key per
// generation (SnapshotKey); ParseSnapshotKey reverses SnapshotKey.
package store
