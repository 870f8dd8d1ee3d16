-- The sealing queue is small in live rows but its file grows with the dead rows of sealed
-- events between vacuums (200,000 events sealed: 1,675 pages for 1,000 live rows). Past
-- 8 MB the planner read it with a parallel sequential scan, starting a parallel worker on
-- every sealing round (6-7 ms of the read's 7-10 ms, measured). A serial scan of the queue
-- costs under 2 ms even then.
ALTER TABLE audit_unsealed SET (parallel_workers = 0);
