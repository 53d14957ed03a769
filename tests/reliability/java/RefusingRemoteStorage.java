package tierkeeper.test;

import java.io.InputStream;
import java.util.Map;
import java.util.Optional;

import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;

/**
 * The smallest RemoteStorageManager a broker accepts, so a test can create a topic with
 * remote.storage.enable=true (Kafka refuses that config unless the broker's remote storage system is on).
 * Every copy fails, so the broker never believes a segment is remote and keeps all its data locally.
 */
public class RefusingRemoteStorage implements RemoteStorageManager {
    @Override
    public void configure(Map<String, ?> configs) {}

    @Override
    public Optional<RemoteLogSegmentMetadata.CustomMetadata> copyLogSegmentData(
            RemoteLogSegmentMetadata metadata, LogSegmentData data) throws RemoteStorageException {
        throw new RemoteStorageException("test stub: no remote storage");
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int start)
            throws RemoteStorageException {
        throw new RemoteStorageException("test stub: no remote storage");
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int start, int end)
            throws RemoteStorageException {
        throw new RemoteStorageException("test stub: no remote storage");
    }

    @Override
    public InputStream fetchIndex(RemoteLogSegmentMetadata metadata, IndexType type)
            throws RemoteStorageException {
        throw new RemoteStorageException("test stub: no remote storage");
    }

    @Override
    public void deleteLogSegmentData(RemoteLogSegmentMetadata metadata) {}

    @Override
    public void close() {}
}
