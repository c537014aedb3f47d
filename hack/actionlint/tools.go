//go:build tools

// Package tools pins actionlint's command (github.com/rhysd/actionlint/cmd/actionlint) for
// scripts/tools.sh, which builds it into ~/.cache/wavegate/bin; tests/release/run.sh lints
// .github/workflows/ with it.
package tools

import (
	_ "github.com/rhysd/actionlint/cmd/actionlint"
)
