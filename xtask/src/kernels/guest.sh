#!/bin/busybox sh
# The kernel matrix's guest: PID 1 of a throwaway VM (`cargo xtask kernels`). It mounts what
# ebee-top reads, starts small workloads, runs the host's ebee-top against them and keeps every
# raw reading as a file in $R; at the end it sends those files to the second serial port,
# framed by @@ebee-file / @@ebee-end lines, and powers off. The host judges the readings:
# this script only measures, so that a check's rule lives in one place (xtask/src/kernels).
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mkdir -p /sys/fs/cgroup
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
R=/tmp/r
mkdir -p $R
log() { echo "$*" >> $R/log; }

# Wait until file $1 contains $2, at most $3 tenths of a second.
wait_for() {
    i=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt "$3" ] && { log "timed out waiting for '$2' in $1"; return 1; }
        sleep 0.1
    done
}

uname -r > $R/kernel
ebee-load bpf-objects > $R/bpf_before 2>> $R/log

# A block device for the disk I/O check: a loop device over a file (loop is a module in
# Debian's kernels; the host puts it at /loop.ko when the package has it). No file system on
# it: some flavours have ext4 as a module too, and buffered writes to the device itself are
# dirtied and counted like a file's.
[ -f /loop.ko ] && insmod /loop.ko 2>> $R/log
DISK=
if dd if=/dev/zero of=/tmp/disk.img bs=1M count=24 2>> $R/log \
    && losetup /dev/loop0 /tmp/disk.img 2>> $R/log; then
    DISK=/dev/loop0
fi
[ -n "$DISK" ] || echo "no block device (loop) in this guest" > $R/disk_none

# Three CPU burners, stopped until ebee-top runs: with three on two CPUs each also waits in the
# run queue. The first sits in a cgroup of its own.
ebee-load burn & A=$!
ebee-load burn & B=$!
ebee-load burn & C=$!
kill -STOP $A $B $C
mkdir -p /sys/fs/cgroup/ebee-check
echo $A > /sys/fs/cgroup/ebee-check/cgroup.procs 2>> $R/log
echo "$A $B $C" > $R/burners

# A request/response server on loopback, pinned below, and found without a pin as well.
ebee-load delay-server --port 7070 --fast-us 200 --slow-us 2000 --slow-every 10 > /tmp/srv.out 2>> $R/log &
SRV=$!
echo $SRV > $R/server
wait_for /tmp/srv.out ready 300

ebee-top -b --format json -d 0.25 -k 50 -p $SRV > $R/batch.json 2> $R/batch.err &
TOP=$!
# Two intervals in: everything is attached and counting.
if wait_for $R/batch.json '"seq":2' 600; then
    cat /proc/$A/schedstat > $R/sched_a0
    kill -CONT $A $B $C
    # The burners alone first: under TCG the server and its client use as much CPU as a
    # burner, so only these intervals can say who must head the list.
    sleep 1.5
    ebee-load delay-client --port 7070 --conns 2 --seconds 3 > $R/client.out 2>> $R/log &
    CL=$!
    echo $CL > $R/client_pid
    wait $CL
    kill -STOP $A $B $C
    cat /proc/$A/schedstat > $R/sched_a1

    # Memory: a process that appears now, so what ebee-top knows of it came from rss_stat.
    mkfifo /tmp/hold.in
    ebee-load hold --mib 48 < /tmp/hold.in > /tmp/hold.out 2>> $R/log &
    MEM=$!
    exec 5> /tmp/hold.in
    echo $MEM > $R/mem_pid
    wait_for /tmp/hold.out ready 300
    echo "grow 16" >&5
    wait_for /tmp/hold.out ok 300

    # Disk I/O: 16 MiB written to the device and fsync'd, then the writer's own counter read.
    if [ -n "$DISK" ]; then
        mkfifo /tmp/disk.in
        ebee-load disk $DISK --mib 16 --fsync < /tmp/disk.in > /tmp/disk.out 2>> $R/log &
        D=$!
        exec 6> /tmp/disk.in
        echo $D > $R/disk_pid
        # Only once it waits for the line (exec'd, and asleep reading it): a thread's
        # counters count from its first switch-out, so a writer that wrote before it ever
        # left a CPU would show less than /proc/PID/io says.
        i=0
        while [ $i -lt 100 ]; do
            grep -q disk /proc/$D/cmdline 2>/dev/null \
                && [ "$(cut -d' ' -f3 /proc/$D/stat 2>/dev/null)" = S ] && break
            sleep 0.1
            i=$((i + 1))
        done
        echo go >&6
        wait_for /tmp/disk.out done 600
        cat /proc/$D/io > $R/disk_io
        echo bye >&6
        exec 6>&-
        wait $D
    fi
    # A few more intervals, so every switch-out above is in a closed interval.
    sleep 1
    grep VmRSS /proc/$MEM/status > $R/mem_vmrss
fi
kill -INT $TOP
wait $TOP
echo $? > $R/batch_rc
kill $A $B $C $SRV 2> /dev/null
exec 5>&-

ebee-top --print-maps > $R/maps 2>&1
echo $? > $R/maps_rc

ebee-top serve --listen 127.0.0.1:9464 -d 0.25 > $R/serve.out 2> $R/serve.err &
S=$!
i=0
while [ $i -lt 300 ]; do
    wget -q -O /tmp/scrape http://127.0.0.1:9464/metrics 2> /dev/null \
        && grep -q '^ebee_process_cpu_seconds_total{' /tmp/scrape && break
    i=$((i + 1))
    sleep 0.1
done
cp /tmp/scrape $R/scrape 2> /dev/null
kill -TERM $S
wait $S
echo $? > $R/serve_rc

ebee-load bpf-objects > $R/bpf_after 2>> $R/log

# Everything to the host, then off.
for f in $R/*; do
    echo "@@ebee-file ${f##*/}"
    cat "$f"
    echo
    echo "@@ebee-end"
done > /dev/ttyS1
sync
poweroff -f
