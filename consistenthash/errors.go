package consistenthash

import "errors"

// ErrEmptyNode is returned when a node name is empty. An empty name would be
// indistinguishable from the "" that Get returns for an empty ring.
var ErrEmptyNode = errors.New("consistenthash: empty node name")

// ErrBadWeight is returned by AddWeighted for a weight below 1.
var ErrBadWeight = errors.New("consistenthash: weight must be at least 1")

// ErrTooManyPoints is returned when one node would get more than MaxPoints
// points on the ring (weight × replicas, or explicit range positions). It
// bounds the memory a single bad flag or weight can make a ring allocate.
var ErrTooManyPoints = errors.New("consistenthash: too many points for one node")

// ErrNoPositions is returned by Ranges.Assign for an empty position list.
var ErrNoPositions = errors.New("consistenthash: no positions")

// ErrPositionTaken is returned by Ranges.Assign when a position is already
// owned by another node or appears twice in the list: two arcs cannot start
// at the same point.
var ErrPositionTaken = errors.New("consistenthash: position already taken")

// ErrRingFull is returned by Ranges.Join when no arc is wide enough to split
// (every arc is a single point of the 2^32 space).
var ErrRingFull = errors.New("consistenthash: no arc left to split")
