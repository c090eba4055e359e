package main

import "errors"

// errUsage marks bad command-line input; main exits with status 2 for it.
var errUsage = errors.New("usage")
