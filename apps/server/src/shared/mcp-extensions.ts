/** MCP extensions Warden speaks (revision 2026-07-28 declares them in `capabilities.extensions`). */
import { isObject } from './objects.ts';

/** The tasks extension (SEP-2663): a tools/call may be answered a task, reached by tasks/get, tasks/update, tasks/cancel. */
export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';

/** Whether declared capabilities (a client's or a server's) take the tasks extension. */
export const takesTasks = (capabilities: unknown): boolean =>
  isObject(capabilities) && isObject(capabilities.extensions) && isObject(capabilities.extensions[TASKS_EXTENSION]);
