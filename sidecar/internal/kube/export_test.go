package kube

// The service account's paths and the post's sentinel, for the tests.
const (
	DefaultCAFile        = defaultCAFile
	DefaultNamespaceFile = defaultNamespaceFile
)

var ErrPost = errPost
