# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_refreshctl_global_optspecs
    string join \n socket= json h/help V/version
end

function __fish_refreshctl_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_refreshctl_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_refreshctl_using_subcommand
    set -l cmd (__fish_refreshctl_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c refreshctl -n "__fish_refreshctl_needs_command" -l socket -d 'The daemon\'s control socket' -r -F
complete -c refreshctl -n "__fish_refreshctl_needs_command" -l json -d 'Print the daemon\'s JSON instead of tables'
complete -c refreshctl -n "__fish_refreshctl_needs_command" -s h -l help -d 'Print help'
complete -c refreshctl -n "__fish_refreshctl_needs_command" -s V -l version -d 'Print version'
complete -c refreshctl -n "__fish_refreshctl_needs_command" -f -a "status" -d 'Per drive: state, stale bytes, last sample, refresh progress and ETA'
complete -c refreshctl -n "__fish_refreshctl_needs_command" -f -a "drives" -d 'The drives and the configured trees on them'
complete -c refreshctl -n "__fish_refreshctl_needs_command" -f -a "plan" -d 'What a refresh would rewrite, per drive'
complete -c refreshctl -n "__fish_refreshctl_needs_command" -f -a "survey" -d 'The latest sample per drive: speed and latency by data age'
complete -c refreshctl -n "__fish_refreshctl_needs_command" -f -a "now" -d 'Sample now and refresh if degraded (or anyway, with --force)'
complete -c refreshctl -n "__fish_refreshctl_needs_command" -f -a "pause" -d 'Pause refreshing (the file in flight stops after its I/O and is checkpointed)'
complete -c refreshctl -n "__fish_refreshctl_needs_command" -f -a "resume" -d 'Resume refreshing'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand status" -l socket -d 'The daemon\'s control socket' -r -F
complete -c refreshctl -n "__fish_refreshctl_using_subcommand status" -l json -d 'Print the daemon\'s JSON instead of tables'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand status" -s h -l help -d 'Print help'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand drives" -l socket -d 'The daemon\'s control socket' -r -F
complete -c refreshctl -n "__fish_refreshctl_using_subcommand drives" -l json -d 'Print the daemon\'s JSON instead of tables'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand drives" -s h -l help -d 'Print help'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand plan" -l socket -d 'The daemon\'s control socket' -r -F
complete -c refreshctl -n "__fish_refreshctl_using_subcommand plan" -l json -d 'Print the daemon\'s JSON instead of tables'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand plan" -s h -l help -d 'Print help'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand survey" -l socket -d 'The daemon\'s control socket' -r -F
complete -c refreshctl -n "__fish_refreshctl_using_subcommand survey" -l json -d 'Print the daemon\'s JSON instead of tables'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand survey" -s h -l help -d 'Print help'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand now" -l drive -d 'Only this drive (e.g. sda, nvme0n1)' -r
complete -c refreshctl -n "__fish_refreshctl_using_subcommand now" -l path -d 'Only files under this path (inside a configured tree)' -r -F
complete -c refreshctl -n "__fish_refreshctl_using_subcommand now" -l socket -d 'The daemon\'s control socket' -r -F
complete -c refreshctl -n "__fish_refreshctl_using_subcommand now" -l force -d 'Refresh the stale files even if the drive looks healthy'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand now" -l wait -d 'Follow the progress until done'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand now" -l json -d 'Print the daemon\'s JSON instead of tables'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand now" -s h -l help -d 'Print help'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand pause" -l drive -r
complete -c refreshctl -n "__fish_refreshctl_using_subcommand pause" -l socket -d 'The daemon\'s control socket' -r -F
complete -c refreshctl -n "__fish_refreshctl_using_subcommand pause" -l json -d 'Print the daemon\'s JSON instead of tables'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand pause" -s h -l help -d 'Print help'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand resume" -l drive -r
complete -c refreshctl -n "__fish_refreshctl_using_subcommand resume" -l socket -d 'The daemon\'s control socket' -r -F
complete -c refreshctl -n "__fish_refreshctl_using_subcommand resume" -l json -d 'Print the daemon\'s JSON instead of tables'
complete -c refreshctl -n "__fish_refreshctl_using_subcommand resume" -s h -l help -d 'Print help'
