package protocol

// FormatES exposes formatES to the tests of package protocol_test.
var FormatES = formatES
