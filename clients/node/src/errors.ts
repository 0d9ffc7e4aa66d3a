/** An error from the server (its text unchanged, e.g. `ERR limit must be …`, `WRONGTYPE …`) or from the caller side before sending. */
export class ThrottleError extends Error {
  override readonly name = 'ThrottleError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}
