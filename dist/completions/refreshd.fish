# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_refreshd_global_optspecs
    string join \n v/verbose q/quiet h/help V/version
end

function __fish_refreshd_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_refreshd_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_refreshd_using_subcommand
    set -l cmd (__fish_refreshd_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c refreshd -n "__fish_refreshd_needs_command" -s v -l verbose -d 'More log output (-v info, -vv debug); RUST_LOG overrides'
complete -c refreshd -n "__fish_refreshd_needs_command" -s q -l quiet -d 'Less log output'
complete -c refreshd -n "__fish_refreshd_needs_command" -s h -l help -d 'Print help'
complete -c refreshd -n "__fish_refreshd_needs_command" -s V -l version -d 'Print version'
complete -c refreshd -n "__fish_refreshd_needs_command" -f -a "refresh" -d 'Rewrite files (or directory trees, one filesystem) in place, safely: the same bytes, O_DIRECT, throttled, under an exclusive lease'
complete -c refreshd -n "__fish_refreshd_needs_command" -f -a "survey" -d 'Measure read speed and latency by data age, per drive, against a fresh reference; say whether each drive is degraded and what a refresh would rewrite. Reads only (plus a small temporary canary)'
complete -c refreshd -n "__fish_refreshd_needs_command" -f -a "run" -d 'Run the daemon in the foreground (systemd: Type=notify)'
complete -c refreshd -n "__fish_refreshd_needs_command" -f -a "check-config" -d 'Validate a configuration: every problem with file:line:col; exit 0/1'
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l stale-after -d 'Only files whose data is at least this old (since the later of the mtime and the daemon\'s last refresh of it, when --state-dir or /var/lib/refreshd holds its record). Applies to the files found in directories; files named on the command line are always refreshed' -r
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l rate -d 'Throttle, e.g. "50MiB/s" (default: unthrottled)' -r
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l strategy -d 'auto: in place under an exclusive lease, kernel relocation for files other processes have open; inplace: in place only (files in use are skipped); relocate: relocation only' -r -f -a "auto\t'In place under an exclusive lease when nobody else has the file open; relocation when someone does and the filesystem supports it'
inplace\t'In place only; files in use are skipped'
relocate\t'Kernel-mediated relocation only'"
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l chunk -d 'Largest I/O size (a power of two, at least 4KiB)' -r
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l queue-depth -d 'Chunks in flight' -r
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l io-backend -d 'I/O backend' -r -f -a "auto\t'io_uring, falling back to pread/pwrite when the kernel refuses it'
io-uring\t'io_uring or fail'
sync\t'pread/pwrite only'"
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l min-free -d 'Free space to keep on copy-on-write filesystems (default 5% of the filesystem)' -r
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l relocate-chunk -d 'Largest unit the kernel relocates at once (the free space it needs)' -r
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l state-dir -d 'Where the crash-recovery journal lives (default: the daemon\'s /var/lib/refreshd when it is writable; without one, a killed run leaves the mtime of the file it was writing moved)' -r -F
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l yield -d 'auto: while an application reads the drive, keep its read latency within 1.2× its latency alone (learned with the refresh silent) and take what that leaves, never below --yield-floor; --rate when it does not read; off: always --rate and --queue-depth' -r -f -a "auto\t'Watch the drive: while an application reads it, hold its latency within 1.2× its latency alone (never below the floor); the configured rate when it does not read (`engine::pacing::pace`)'
off\t'Always the configured rate and depth'"
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l yield-floor -d 'The rate never drops below this while sharing the drive' -r
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l io-priority -d 'idle: reads in the idle I/O class and writes at best-effort 7, per request; inherit: the process\'s own priority (ionice)' -r -f -a "idle\t'Reads in the idle class, writes (which must finish inside a lease break) best-effort at the lowest level, per request'
inherit\t'The process\'s own priority (e.g. set by `ionice` or the unit)'"
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l dry-run -d 'Check and plan every file, write nothing'
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l json -d 'One JSON object per file, then a summary object'
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l verify -d 'Read every written chunk back and compare checksums'
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l include-shared -d 'Also rewrite shared (reflinked/snapshotted) extents; this unshares them and costs space'
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -l no-progress -d 'No progress bar'
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -s v -l verbose -d 'More log output (-v info, -vv debug); RUST_LOG overrides'
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -s q -l quiet -d 'Less log output'
complete -c refreshd -n "__fish_refreshd_using_subcommand refresh" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c refreshd -n "__fish_refreshd_using_subcommand survey" -l svg -d 'Also write a chart of speed and latency by data age (SVG)' -r -F
complete -c refreshd -n "__fish_refreshd_using_subcommand survey" -l stale-after -d 'Data older than this is stale' -r
complete -c refreshd -n "__fish_refreshd_using_subcommand survey" -l sample-bytes -d 'Read budget per drive' -r
complete -c refreshd -n "__fish_refreshd_using_subcommand survey" -l min-throughput -d 'Stale-data read floor' -r
complete -c refreshd -n "__fish_refreshd_using_subcommand survey" -l min-ratio -d 'Stale/fresh throughput ratio floor' -r
complete -c refreshd -n "__fish_refreshd_using_subcommand survey" -l min-free -d 'Free space that must remain after writing the canary' -r
complete -c refreshd -n "__fish_refreshd_using_subcommand survey" -l seed -d 'Seed for choosing what to read (same seed, same choices)' -r
complete -c refreshd -n "__fish_refreshd_using_subcommand survey" -l state-dir -d 'The daemon\'s state directory: the files it refreshed are aged from its record (read only), as the daemon would (default /var/lib/refreshd)' -r -F
complete -c refreshd -n "__fish_refreshd_using_subcommand survey" -l json -d 'One JSON document instead of tables'
complete -c refreshd -n "__fish_refreshd_using_subcommand survey" -s v -l verbose -d 'More log output (-v info, -vv debug); RUST_LOG overrides'
complete -c refreshd -n "__fish_refreshd_using_subcommand survey" -s q -l quiet -d 'Less log output'
complete -c refreshd -n "__fish_refreshd_using_subcommand survey" -s h -l help -d 'Print help'
complete -c refreshd -n "__fish_refreshd_using_subcommand run" -l config -d 'Configuration file' -r -F
complete -c refreshd -n "__fish_refreshd_using_subcommand run" -s v -l verbose -d 'More log output (-v info, -vv debug); RUST_LOG overrides'
complete -c refreshd -n "__fish_refreshd_using_subcommand run" -s q -l quiet -d 'Less log output'
complete -c refreshd -n "__fish_refreshd_using_subcommand run" -s h -l help -d 'Print help'
complete -c refreshd -n "__fish_refreshd_using_subcommand check-config" -l config -d 'Configuration file' -r -F
complete -c refreshd -n "__fish_refreshd_using_subcommand check-config" -s v -l verbose -d 'More log output (-v info, -vv debug); RUST_LOG overrides'
complete -c refreshd -n "__fish_refreshd_using_subcommand check-config" -s q -l quiet -d 'Less log output'
complete -c refreshd -n "__fish_refreshd_using_subcommand check-config" -s h -l help -d 'Print help'
