// Package manifests reads Kubernetes objects — Namespaces, Pods,
// NetworkPolicies and Services — from a directory of YAML or JSON files, so
// a node can enforce policy without an API server (the standalone mode and
// the demo) and tests can describe a cluster as files.
//
// A directory is read whole: every *.yaml, *.yml and *.json file in it (not
// in subdirectories; names starting with '.' are skipped, so editor swap
// and lock files never count), each holding one or more documents
// separated by "---" lines, each document an object or a v1 List of
// objects. Objects are defaulted as the API server would default them
// (namespace "default", TCP protocols, policy types, the
// kubernetes.io/metadata.name label) and validated; an object the API
// server would reject fails the load with an error naming the file and
// the document. A named NetworkPolicy lockstep cannot compile is the
// exception: it is loaded, with a warning in [Objects.Warnings], and the
// compiler fails it closed for the pods it selects, as it does one from
// the API server, so that one bad policy does not stop a node. Kinds
// lockstep does not use are skipped and reported in [Objects.Warnings].
//
// A Service must name its ClusterIP (spec.clusterIP, and spec.clusterIPs
// for a dual-stack one), or "None" for a headless Service: without an API
// server there is no service range to allocate from, so lockstep refuses a
// ClusterIP, NodePort or LoadBalancer Service without one
// ([ErrNoClusterIP]) rather than pick an address that may be another's. Its
// endpoints are not read from manifests: the agent computes them from the
// Service's selector and the pods it runs (agent/endpointslice). Its
// externalIPs, and the load-balancer IPs of its status, are translated for
// pods as the ClusterIPs are, without kube-proxy's masquerade (there is no
// kube-proxy); NodePorts are not, as the standalone agent has no Node.
//
// Objects without a metadata.uid get one derived from kind, namespace and
// name, so a reload of unchanged files yields the same UIDs.
//
// Memory follows the files, not their documents' trees: files are read
// one at a time, and a document that is a JSON v1 List (a whole cluster
// written by a tool, or by kubectl get -o json) is read item by item, each
// item converted as a document of its own would be. Loading 10k pods from
// one such file thus needs a few times the file's size, where a tree of
// the whole document needs tens of times.
//
// [Watch] follows the directory and hands its caller each complete new
// set of objects. A bad edit is reported and the last good set stays in
// force: a typo in one file must not drop every policy on the node. A
// [Watcher] splits Watch into its first load and what follows, so that
// the agent can load before it serves and follow afterwards without
// reading the files twice; between loads it only hashes them.
//
// The YAML decoder (go.yaml.in/yaml/v3) is not free to initialise; the
// package is meant for the agent, and cmd/lockstep's deps test decides
// whether it may be linked into the binary the CNI plugin shares.
package manifests
