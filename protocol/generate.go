package protocol

//go:generate bash generate.sh
