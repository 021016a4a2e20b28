package settings

// ParseSize is what settings_test.go reads FormatSize's output back with.
var ParseSize = parseSize
