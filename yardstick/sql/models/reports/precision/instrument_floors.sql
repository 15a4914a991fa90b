/* What an instrument cannot tell apart: one row per figure whose instrument has a floor. A
   value below it is shown as "< floor", never as a number (INFO latencystats times a call in
   whole microseconds: a PING of 0.3 µs is recorded as 0, stored by its histogram as 1 ns
   and printed p50=0.001). */
select * from (values
    ('server_ping_p50_us', 1.0, '< 1 µs', '< 1 µs, latencystats resolution'),
    ('server_ping_p99_us', 1.0, '< 1 µs', '< 1 µs, latencystats resolution'),
    ('server_ping_p999_us', 1.0, '< 1 µs', '< 1 µs, latencystats resolution')
-- t(...) names the VALUES columns (the linter reads it as an unused alias).
) as t(figure, floor_value, below_text, shown_as)  -- noqa: AL05, LT01
