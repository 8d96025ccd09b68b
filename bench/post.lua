-- wrk script: POST the JSON body in the environment variable BODY (bench/serve_bench.sh).
wrk.method = "POST"
wrk.body = os.getenv("BODY")
wrk.headers["Content-Type"] = "application/json"

local errors = 0
response = function(status, headers, body)
  if status ~= 200 then errors = errors + 1 end
end

done = function(summary, latency, requests)
  io.write(string.format("non-200: %d\n", summary.errors.status))
end
