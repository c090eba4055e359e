//go:build race

package main

// raceEnabled: tests that load a cluster give it more time, since the race
// detector makes every request several times slower.
const raceEnabled = true
