import { z } from 'zod';
import { AbsolutePath } from './paths.js';

/** Every fs request may carry a sandbox context: `sandbox` (0.125+) or `sandboxPolicy` (0.120). Validated separately. */
const withSandbox = {
  /** The request is confined as a process with this sandbox would be. @since 0.125 @shape SandboxParam */
  sandbox: z.unknown().optional(),
  /** The same, as 0.120's SandboxPolicy. @since 0.120 @shape SandboxPolicy */
  sandboxPolicy: z.unknown().optional(),
};

export const ReadFileParams = z.object({ path: AbsolutePath, ...withSandbox });
export const ReadFileResult = z.object({ dataBase64: z.string() });
export const WriteFileParams = z.object({ path: AbsolutePath, dataBase64: z.string(), ...withSandbox });
export const CreateDirectoryParams = z.object({
  path: AbsolutePath,
  recursive: z.boolean().nullish(),
  ...withSandbox,
});
export const GetMetadataParams = z.object({ path: AbsolutePath, ...withSandbox });
export const Metadata = z.object({
  isDirectory: z.boolean(),
  isFile: z.boolean(),
  isSymlink: z.boolean(),
  size: z.number(),
  createdAtMs: z.number(),
  modifiedAtMs: z.number(),
});
export type Metadata = z.infer<typeof Metadata>;
export const ReadDirectoryParams = z.object({ path: AbsolutePath, ...withSandbox });
export const DirectoryEntry = z.object({
  fileName: z.string(),
  isDirectory: z.boolean(),
  isFile: z.boolean(),
});
export type DirectoryEntry = z.infer<typeof DirectoryEntry>;
export const ReadDirectoryResult = z.object({ entries: z.array(DirectoryEntry) });
export const RemoveParams = z.object({
  path: AbsolutePath,
  recursive: z.boolean().nullish(),
  force: z.boolean().nullish(),
  ...withSandbox,
});
export const CopyParams = z.object({
  sourcePath: AbsolutePath,
  destinationPath: AbsolutePath,
  recursive: z.boolean().nullish(),
  ...withSandbox,
});
export const CanonicalizeParams = z.object({ path: AbsolutePath, ...withSandbox });
export const CanonicalizeResult = z.object({ path: z.string() });
