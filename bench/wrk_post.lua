-- POST the file named by $BODY_FILE on every request; print a JSON summary at the end.
-- With $BODY_LINES=1 the file holds one body per line, sent in turn (JSON bodies have no raw
-- newlines), so that no two consecutive requests are the same. With $BODY_SEQ=1 every "@SEQ@"
-- in the body is replaced by the request's number, so that no two requests are ever the same.
local file = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local lines = {}
if os.getenv("BODY_LINES") == "1" then
  for line in file:lines() do
    if #line > 0 then
      lines[#lines + 1] = line
    end
  end
else
  wrk.body = file:read("*a")
end
file:close()

if os.getenv("BODY_SEQ") == "1" then
  local template, sequence = wrk.body, 0
  request = function()
    sequence = sequence + 1
    return wrk.format(nil, nil, nil, (template:gsub("@SEQ@", tostring(sequence))))
  end
elseif #lines > 0 then
  local requests, next_request = {}, 0
  -- Built once per thread, once wrk has filled in the Host header and the path.
  init = function(args)
    for i, line in ipairs(lines) do
      requests[i] = wrk.format(nil, nil, nil, line)
    end
  end
  request = function()
    next_request = next_request % #requests + 1
    return requests[next_request]
  end
end

done = function(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "non_2xx": %d, "socket_errors": %d, ' ..
    '"p50_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, errors.status,
    errors.connect + errors.read + errors.write + errors.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
