module github.com/walbroker/walbroker

go 1.26.0

require (
	github.com/edsrzf/mmap-go v1.2.0
	github.com/klauspost/crc32 v1.3.0
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.50.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
