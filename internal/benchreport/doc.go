// Package benchreport presents benchmark results: summary statistics of
// repeated measurements ([Sample], [PairedRatio]), tables rendered as GitHub
// Markdown or aligned terminal text ([Table]), and line charts written to a
// single PNG file ([WritePNG]).
//
// The package measures nothing and reads no flags or environment; the bench
// command (cmd/agentbench) collects the numbers and decides what to show.
// Every function is pure except [WritePNG], which writes the one file it is
// given.
package benchreport
