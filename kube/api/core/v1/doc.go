// Package v1 is the subset of the Kubernetes core/v1 group lockstep reads:
// Pods, Namespaces, Nodes and Services, and the Events it writes.
package v1

import "lockstep.dev/lockstep/kube/api/schema"

// SchemeGroupVersion is the core group, version v1.
var SchemeGroupVersion = schema.GroupVersion{Version: "v1"}
