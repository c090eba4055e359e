// Package origin provides the places a ringcache group loads missing keys
// from: an HTTP upstream (HTTP), a directory of files (Dir) and a
// deterministic demo source (Demo). Each is a cache.Getter.
//
// A group calls its Getter only on the owner of a key and only once for
// concurrent callers, so an origin sees each miss once per node; the origins
// here add what an operator needs at that boundary: a timeout, a bound on the
// body size, and the mapping of "absent" to cache.ErrNotFound. Every origin
// is safe for concurrent use.
package origin
