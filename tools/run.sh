#!/bin/sh
# make run's last step: prints where the daemon will listen and a ready-to-paste curl, then
# becomes `tandem serve ARGS...`. The address comes from the daemon's own reading of its flags,
# TANDEM_* environment and config file (`tandem serve --print-config`), so that
# `make run ARGS="--port 8081"`, `TANDEM_PORT=8081 make run` or a config file all print the real
# port.
#
#   tools/run.sh BUILD/tandem [serve flags...]
tandem=$1
shift
cfg=$("$tandem" serve "$@" --print-config) || exit 2
val() { printf '%s\n' "$cfg" | sed -n "s/^$1 = \"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p"; }
port=$(val port)
[ -n "$port" ] || exec "$tandem" serve "$@" # --help among the flags: no configuration printed
host=$(val host)
admin=$(val admin_port)
model=$(val model)
case $host in
0.0.0.0 | "") host=127.0.0.1 ;;
:: | "[::]") host="[::1]" ;;
*:*) host="[$host]" ;;
esac
auth=""
if printf '%s\n' "$cfg" | grep -q '^# api_key is set' || [ -n "$(val api_key_file)" ]; then
    auth=" -H 'Authorization: Bearer YOUR_API_KEY'"
fi
echo "tandem: serving ${model:-the bundled models/stories260K} (Ctrl-C drains and stops)."
if [ "$port" = 0 ]; then
    echo "The API port is picked at start-up: the log's event=listening listener=api line names it."
    port=PORT
else
    echo "API http://$host:$port, admin http://$(val admin_host):$admin (/metrics)."
fi
echo "Once it logs event=ready, try:"
echo "  curl -s http://$host:$port/v1/completions -H 'Content-Type: application/json'$auth -d '{\"prompt\": \"Once upon a time\", \"max_tokens\": 32, \"temperature\": 0}'"
exec "$tandem" serve "$@"
