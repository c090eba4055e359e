package peers

import "slices"

// Static hands a fixed member set to s, for clusters without etcd: self and peers, checked,
// sorted and deduplicated, exactly as a Registry would hand them over. It returns the set it
// passed, or an error wrapping ErrBadPeerURL without calling s, or the error of s.Set. It
// always calls Set, also on a WeightedSetter: every static member has weight 1.
func Static(s Setter, self string, peers ...string) ([]string, error) {
	all := append([]string{self}, peers...)
	for _, p := range all {
		if err := checkPeerURL(p); err != nil {
			return nil, err
		}
	}
	slices.Sort(all)
	all = slices.Compact(all)
	if err := s.Set(slices.Clone(all)...); err != nil {
		return nil, err
	}
	return all, nil
}
