module github.com/walbroker/walbroker

go 1.26.0

require (
	github.com/edsrzf/mmap-go v1.2.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/klauspost/crc32 v1.3.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
)
