// Package k8s holds ringcache's Kubernetes manifests (etcd and ringcached
// StatefulSets, their Services and PodDisruptionBudgets, a kustomization).
// No cluster runs here, so its tests check them instead: every manifest
// decodes strictly into the k8s.io/api types, the cross-references hold
// (selectors and labels, ports and flags, probes and routes, environment
// variables and the daemon's settings), and the daemon and etcd, run with
// the manifests' settings on loopback, answer the probes.
package k8s
