package promtext

import (
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

var processStart = time.Now()

// WriteProcessMetrics writes the usual process and Go runtime gauges:
// goroutines, heap in use, start time, open file descriptors and resident
// memory. Register it with RegisterWriter.
func WriteProcessMetrics(w io.Writer) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gauge := func(name, help string, v float64) {
		WriteHeader(w, name, help, "gauge")
		WriteSample(w, name, v)
	}
	gauge("go_goroutines", "Number of goroutines.", float64(runtime.NumGoroutine()))
	gauge("go_memstats_heap_inuse_bytes", "Bytes in in-use heap spans.", float64(ms.HeapInuse))
	gauge("process_start_time_seconds", "Start time of the process since the Unix epoch.", float64(processStart.Unix()))
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		gauge("process_open_fds", "Number of open file descriptors.", float64(len(fds)))
	}
	if statm, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(statm)); len(f) > 1 {
			if pages, err := strconv.ParseFloat(f[1], 64); err == nil {
				gauge("process_resident_memory_bytes", "Resident memory size in bytes.", pages*float64(os.Getpagesize()))
			}
		}
	}
}
