_refreshd() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="refreshd"
                ;;
            refreshd,check-config)
                cmd="refreshd__subcmd__check__subcmd__config"
                ;;
            refreshd,refresh)
                cmd="refreshd__subcmd__refresh"
                ;;
            refreshd,run)
                cmd="refreshd__subcmd__run"
                ;;
            refreshd,survey)
                cmd="refreshd__subcmd__survey"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        refreshd)
            opts="-v -q -h -V --verbose --quiet --help --version refresh survey run check-config"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        refreshd__subcmd__check__subcmd__config)
            opts="-v -q -h --config --verbose --quiet --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        refreshd__subcmd__refresh)
            opts="-v -q -h --stale-after --rate --strategy --dry-run --json --verify --chunk --queue-depth --io-backend --include-shared --min-free --no-progress --relocate-chunk --state-dir --yield --yield-floor --io-priority --verbose --quiet --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --stale-after)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --rate)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --strategy)
                    COMPREPLY=($(compgen -W "auto inplace relocate" -- "${cur}"))
                    return 0
                    ;;
                --chunk)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --queue-depth)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --io-backend)
                    COMPREPLY=($(compgen -W "auto io-uring sync" -- "${cur}"))
                    return 0
                    ;;
                --min-free)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --relocate-chunk)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --state-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --yield)
                    COMPREPLY=($(compgen -W "auto off" -- "${cur}"))
                    return 0
                    ;;
                --yield-floor)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --io-priority)
                    COMPREPLY=($(compgen -W "idle inherit" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        refreshd__subcmd__run)
            opts="-v -q -h --config --verbose --quiet --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        refreshd__subcmd__survey)
            opts="-v -q -h --json --svg --stale-after --sample-bytes --min-throughput --min-ratio --min-free --seed --state-dir --verbose --quiet --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --svg)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stale-after)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --sample-bytes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-throughput)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-ratio)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-free)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --seed)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --state-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _refreshd -o nosort -o bashdefault -o default refreshd
else
    complete -F _refreshd -o bashdefault -o default refreshd
fi
